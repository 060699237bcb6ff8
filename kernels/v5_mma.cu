// v5_mma: FlashAttention-2 forward on tensor cores (mma.sync m16n8k16), fp16 and bf16 in, fp32 accumulate.
//
// What changed since v4: the two matrix products S = Q K^T and O += P V leave the fp32 CUDA cores
//   (FFMA, one multiply-add per thread per instruction) for the tensor cores (HMMA: 2048 multiply-adds
//   per warp instruction). Inputs are fp16/bf16 (half the bytes of fp32); Q's A-fragments come from
//   ldmatrix (kept in registers at D=64, re-read per key tile at D=128); K and V stream through
//   shared memory with cp.async (two stages, rows padded by 16 bytes so ldmatrix is free of bank
//   conflicts); the online softmax runs on the accumulator fragments in registers, rescaling O only
//   when a row max grows by more than 2^8 (warp vote); P is re-packed in registers as the A operand
//   of P V. The key loop is split: a mask-free steady state, then the ragged/diagonal tiles, where a
//   warp skips tiles entirely right of its rows. Causal blocks run longest-first.
// Bottleneck it attacks: v4 is bound by the FP32 pipe (FFMA issue; sm__pipe_fma_cycles_active near
//   its peak) while the tensor pipe sits idle; the fp32 ceiling is ~67 TFLOP/s on an H100/H200
//   against ~790 measured for dense bf16 matrix products.
// Predicted gain (written before measuring): ~300 TFLOP/s in fp16 at B=8,H=32,N=4096,D=64 and ~340 at
//   B=8,H=16,N=4096,D=128 -- the level of SDPA's flash backend, which uses this same design -- i.e.
//   roughly 8-10x over the best fp32 rung. The limit then moves to mma.sync issue rate, shared-memory
//   bandwidth for the K/V fragments, and the fp32 softmax work (FFMA + MUFU.EX2 per score).
// Measured (NVIDIA H200, 1980 MHz, torch 2.11 + CUDA 13.0, 2026-11-21, commit 723c393; fp16, median
//   of 50 with L2 flushed, round-robin with SDPA; benchmarks/ladder_dev.py), TFLOP/s and vs SDPA flash:
//     B8 H32 N4096 D64:          333.6  1.12x  (flash 298.6, cuDNN 473.8)
//     B8 H32 N4096 D64 causal:   309.1  1.11x  (flash 279.0, cuDNN 425.0)
//     B8 H16 N4096 D128:         342.4  1.04x  (flash 330.7, cuDNN 658.8)
//     B8 H16 N4096 D128 causal:  323.6  1.06x  (flash 305.3, cuDNN 571.8)
//   `lab bench` (benchmarks/RESULTS.md; median of 30, L2 flushed, side by side), two runs the same
//   day: 1.08-1.14x, 1.11-1.13x, 1.05-1.09x and 1.13-1.14x SDPA flash on the same four shapes.
//   About 50% of the tensor pipe (ncu: 52-60% hmma cycles active); cuDNN (wgmma, Hopper-only) is
//   1.5-2x faster still. The iteration log, predictions and misses: benchmarks/v5_notes.md.
// Profile it: lab profile --variant v5 --dtype float16
//
// Layout of one CTA (defaults: 4 warps, MT = 2, so BLOCK_M = 4 x 16 x MT = 128 query rows; BLOCK_N = 64 keys):
//
//            K_j^T (D x BLOCK_N, smem, ldmatrix)          V_j (BLOCK_N x D, smem, ldmatrix.trans)
//            +----+----+-- ... --+----+                   +----+----+-- ... --+----+
//            |n8  |n8  |         |n8  |                   |d8  |d8  |         |d8  |
//  Q (regs)  +----+----+-- ... --+----+       P (regs)    +----+----+-- ... --+----+
//  +------+  S = Q K^T, fp32 in registers     +------+    O += P V, fp32 in registers
//  |warp 0|  [16*MT x BLOCK_N] per warp  -->  |warp 0| -> [16*MT x D] per warp
//  |warp 1|  online softmax on the quad:      |warp 1|
//  |warp 2|  row max/sum via shfl_xor 1,2     |warp 2|    each warp owns its query rows; every warp
//  |warp 3|  exp2(s*scale*log2e - m*...)      |warp 3|    reads the whole K_j and V_j tile
//  +------+                                   +------+
//
//  One m16n8k16 MMA: A = 16 query rows x 16 (d or keys), B = 16 x 8 (keys or d), C = 16 x 8 fp32.
//  Thread `lane` holds C rows g = lane/4 and g+8, columns 2*(lane%4)+{0,1}: the four lanes of a quad
//  share a row, so a row reduction is two shuffles. The S accumulator of key tiles 2k and 2k+1 is,
//  re-packed to 16 bits, exactly the A fragment of k-step k of P V.
//
//  Shared memory: [stage 0: K | V][stage 1: K | V][Q] (Q aliases stage 1 when it lives in registers),
//  rows of D 16-bit values padded by one 16-byte chunk: the eight rows one ldmatrix phase reads
//  (same column, consecutive rows) land in eight different 16-byte bank groups, so no conflicts,
//  and unlike an XOR swizzle every fragment address is a per-lane base plus an immediate.
//
//  Pipeline per key tile j (stage j%2): wait K_j -> barrier -> issue cp.async for K_{j+1}, V_{j+1}
//  into the other stage -> S = Q K_j^T -> mask (ragged tail, causal diagonal only) -> softmax ->
//  wait V_j -> barrier -> O += P V_j. Causal CTAs stop at their diagonal tile (no fully masked tile
//  is read) and are launched longest-first.
#include "common.cuh"

#include <cmath>
#include <type_traits>

namespace v5 {

// Tile configuration. MT = m16 tiles per warp (16 or 32 query rows per warp); QREGS keeps Q's
// A-fragments in registers for the whole kernel, otherwise they are re-read from shared memory for
// every key tile (fewer registers, more shared-memory traffic).
// LAZY: rescale O only when some row's max grew by more than 2^kLazyLog2 (see the softmax step).
// HEAVY_FIRST (causal): launch the query blocks that see the most keys first.
// SPLIT: run the tiles that need no mask in their own loop (see tile_step).
template <int D_, int WARPS_, int MT_, int BN_, bool QREGS_, int MIN_BLOCKS_, bool LAZY_ = false,
          bool HEAVY_FIRST_ = true, bool SPLIT_ = true>
struct Config {
  static constexpr int D = D_, kWarps = WARPS_, MT = MT_, BN = BN_, kMinBlocks = MIN_BLOCKS_;
  static constexpr bool kQRegs = QREGS_, kLazy = LAZY_, kHeavyFirst = HEAVY_FIRST_, kSplit = SPLIT_;
  // Causal heavy-first order runs over groups of this many heads at a time: enough work per group
  // (32 heads x a triangle of blocks) that a group's heaviest block never forms the kernel's tail,
  // few enough that the ~8 CTAs of one head in flight still share its K/V tiles in L2.
  static constexpr int kHeadGroup = 32;
  static constexpr float kLazyLog2 = 8.f;  // P <= 2^8: exact enough in fp16/bf16 and fp32 sums
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = 16 * MT;
  static constexpr int BM = kWarps * kWarpRows;
  static constexpr int kChunks = D / 8;        // 16-byte chunks per row of D 16-bit values
  static constexpr int kRowBytes = D * 2 + 16;  // row pitch in shared memory: one chunk of padding
  static constexpr int kTileKVBytes = BN * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileKVBytes;  // K then V
  static constexpr int kTileQBytes = BM * kRowBytes;
  // Q in registers: its shared tile is dead after the prologue, so it (and later the O staging
  // tile) reuses stage 1, which is first written after the barrier that follows the Q reads.
  static constexpr int kQOffset = kQRegs ? kStageBytes : 2 * kStageBytes;
  static constexpr int kSmemBytes =
      kQRegs ? (kQOffset + kTileQBytes > 2 * kStageBytes ? kQOffset + kTileQBytes : 2 * kStageBytes)
             : 2 * kStageBytes + kTileQBytes;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BN % 16 == 0, "key tile must be a whole number of k16 steps");
};

// This thread's share of copying a [ROWS, D] tile into padded shared memory: chunk tid % (D/8) of
// rows tid / (D/8) + i * kRowStep. The offsets are computed once per kernel; per tile only the
// tile's base moves and every copy is base + immediate. Rows >= valid_rows are zero-filled (a zero
// V row times a zero probability stays zero, where garbage could be NaN); full tiles skip the
// predicate entirely.
template <int D, int THREADS>
struct CopyPlan {
  static constexpr int kChunks = D / 8, kRowStep = THREADS / kChunks, kRowBytes = D * 2 + 16;
  static_assert(THREADS % kChunks == 0, "a CTA must cover whole rows per step");
  int row0;        // first row this thread copies
  uint32_t s_off;  // its byte offset in a shared tile
  int g_off;       // its element offset in a global tile

  __device__ __forceinline__ explicit CopyPlan(int tid)
      : row0(tid / kChunks), s_off(row0 * kRowBytes + (tid % kChunks) * 16), g_off(row0 * D + (tid % kChunks) * 8) {}

  template <int ROWS, typename T>
  __device__ __forceinline__ void copy(uint32_t s_tile, const T* __restrict__ g_tile, int valid_rows) const {
    static_assert(ROWS % kRowStep == 0, "tile rows must split evenly over the CTA");
    const uint32_t dst = s_tile + s_off;
    const T* src = g_tile + g_off;
    if (valid_rows >= ROWS) {
#pragma unroll
      for (int i = 0; i < ROWS / kRowStep; ++i) lab_cp_async_16(dst + i * kRowStep * kRowBytes, src + i * kRowStep * D);
    } else {
#pragma unroll
      for (int i = 0; i < ROWS / kRowStep; ++i) {
        const bool ok = row0 + i * kRowStep < valid_rows;
        lab_cp_async_16(dst + i * kRowStep * kRowBytes, ok ? src + i * kRowStep * D : g_tile, ok ? 16 : 0);
      }
    }
  }
};

template <class C, typename T, bool CAUSAL>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
fwd_kernel(const T* __restrict__ q,  // [B*H, nq, D]
           const T* __restrict__ k,  // [B*H, nk, D]
           const T* __restrict__ v,  // [B*H, nk, D]
           T* __restrict__ o,        // [B*H, nq, D]
           int nq, int nk, int bh_total, float scale_log2) {
  constexpr int D = C::D, BN = C::BN, MT = C::MT, RB = C::kRowBytes;
  extern __shared__ __align__(1024) uint8_t smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Causal: the last query blocks see the most keys; launch them first so the tail is short ones.
  int m_block, bh_index;
  if constexpr (CAUSAL && C::kHeavyFirst) {
    // 1-D grid: within a group of heads, every head's heaviest query block first, then the next
    // heaviest of every head, ... (longest-processing-time-first), so the tail is light blocks.
    const int m_blocks = lab_cdiv(nq, C::BM);
    const int group = blockIdx.x / (m_blocks * C::kHeadGroup);
    const int within = blockIdx.x - group * m_blocks * C::kHeadGroup;
    const int heads = min(C::kHeadGroup, bh_total - group * C::kHeadGroup);
    const int rank = within / heads;
    m_block = m_blocks - 1 - rank;
    bh_index = group * C::kHeadGroup + (within - rank * heads);
  } else {
    m_block = blockIdx.x;
    bh_index = blockIdx.y;
  }
  const int m0 = m_block * C::BM;
  const size_t bh = bh_index;
  q += (bh * nq + m0) * D;
  o += (bh * nq + m0) * D;
  k += bh * nk * D;
  v += bh * nk * D;

  const uint32_t s_base = lab_smem_addr(smem);
  const uint32_t s_q = s_base + C::kQOffset;

  // Per-lane ldmatrix row addresses (lanes 8i..8i+7 address the rows of matrix i). Every other
  // offset -- the 16-column k-step, the 16-row block, the stage -- is a compile-time constant the
  // compiler folds into the instruction's immediate: the padding keeps addresses linear.
  // A operand (Q): matrices {rows 0-7, 8-15} x {cols 0-7, 8-15} -> a0..a3.
  const uint32_t a_off = (warp * C::kWarpRows + (lane & 15)) * RB + (lane >> 4) * 16;
  // B operand from K (non-transposed): {keys 0-7: d 0-7, d 8-15}, {keys 8-15: d 0-7, d 8-15}.
  const uint32_t k_off = ((lane & 7) + ((lane >> 4) << 3)) * RB + ((lane >> 3) & 1) * 16;
  // B operand from V (transposed): {keys 0-7, keys 8-15} x {d 0-7, d 8-15}.
  const uint32_t v_off = ((lane & 7) + (((lane >> 3) & 1) << 3)) * RB + (lane >> 4) * 16;

  const int row_end = CAUSAL ? min(nq, m0 + C::BM) : nq;  // last query row of this block + 1
  const int n_end = CAUSAL ? min(nk, row_end) : nk;       // keys any row of this block can see
  const int n_tiles = lab_cdiv(n_end, BN);

  // Prologue: Q, then K_0 and V_0 in their own groups so S can start before V_0 lands.
  const CopyPlan<D, C::kThreads> plan(tid);
  plan.template copy<C::BM>(s_q, q, nq - m0);
  lab_cp_async_commit();
  plan.template copy<BN>(s_base, k, nk);
  lab_cp_async_commit();
  plan.template copy<BN>(s_base + C::kTileKVBytes, v, nk);
  lab_cp_async_commit();

  // Causal: this warp's rows; a key tile entirely right of them is skipped by the warp (it still
  // takes part in the copies and barriers), one crossing them is masked.
  const int warp_row_lo = m0 + warp * C::kWarpRows, warp_row_hi = warp_row_lo + C::kWarpRows - 1;

  uint32_t q_frag[C::kQRegs ? MT : 1][C::kQRegs ? D / 16 : 1][4];
  if constexpr (C::kQRegs) {
    lab_cp_async_wait<2>();  // Q landed (K_0, V_0 may be in flight)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        lab_ldmatrix_x4(q_frag[mt][kk], s_q + a_off + kk * 32 + mt * 16 * RB);
  }

  float o_acc[MT][D / 8][4];
  // row_max is the running max already multiplied by scale*log2(e) (the offset every exponent
  // uses); row_sum is this lane's partial sum; the quad adds its four at the end.
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  // One key tile. kMasked = false is the steady state: a full tile that every row of the CTA sees
  // whole, so no mask and no per-warp skip, and the compiler schedules it like the non-causal
  // loop (it sinks the exponentials past the V barrier to overlap the P V products). The masked
  // variant handles the ragged last tile and, causal, the tiles crossing the diagonal.
  auto tile_step = [&](const int j, auto masked_tag) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const int stage = j & 1;
    const uint32_t s_k = s_base + stage * C::kStageBytes;
    const uint32_t s_v = s_k + C::kTileKVBytes;

    lab_cp_async_wait<1>();  // K_j landed; V_j may still be in flight
    // K_j visible to every warp; every warp is done with the other stage (tile j-1) and with Q.
    __syncthreads();
    {
      const int nxt = j + 1;
      const uint32_t s_next = s_base + (stage ^ 1) * C::kStageBytes;
      if (nxt < n_tiles) plan.template copy<BN>(s_next, k + (size_t)nxt * BN * D, nk - nxt * BN);
      lab_cp_async_commit();
      if (nxt < n_tiles) plan.template copy<BN>(s_next + C::kTileKVBytes, v + (size_t)nxt * BN * D, nk - nxt * BN);
      lab_cp_async_commit();
    }
    const int n0 = j * BN;
    const bool warp_active = !kMasked || !CAUSAL || n0 <= warp_row_hi;
    uint32_t p_frag[MT][BN / 16][4];
    if (warp_active) {

    // S = Q K_j^T, fp32 accumulators [MT][BN/8 key tiles of 8][4]; k-step 0 starts from zero.
    float s[MT][BN / 8][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (C::kQRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][kk][e];
        } else {
          lab_ldmatrix_x4(a[mt], s_q + a_off + kk * 32 + mt * 16 * RB);
        }
      }
#pragma unroll
      for (int p = 0; p < BN / 16; ++p) {
        uint32_t b[4];
        lab_ldmatrix_x4(b, s_k + k_off + kk * 32 + p * 16 * RB);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (kk == 0) {
            lab_mma_m16n8k16_zero_acc<T>(s[mt][2 * p], a[mt], b[0], b[1]);
            lab_mma_m16n8k16_zero_acc<T>(s[mt][2 * p + 1], a[mt], b[2], b[3]);
          } else {
            lab_mma_m16n8k16<T>(s[mt][2 * p], a[mt], b[0], b[1]);
            lab_mma_m16n8k16<T>(s[mt][2 * p + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }

    // Mask only where needed: the ragged last tile (keys >= nk) and, causal, tiles crossing the
    // diagonal of this warp's rows (some key > some row). Uniform branch per warp.
    if (kMasked && (n0 + BN > nk || (CAUSAL && n0 + BN - 1 > warp_row_lo))) {
      const int row0 = warp_row_lo + (lane >> 2);
      const int col0 = n0 + (lane & 3) * 2;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = row0 + mt * 16 + (e >> 1) * 8;
            const int col = col0 + nt * 8 + (e & 1);
            if (col >= nk || (CAUSAL && col > row)) s[mt][nt][e] = -INFINITY;
          }
    }

    // Online softmax on the fragments; P re-packed as the A operand of P V.
    // Tile row max (scaled), reduced over the quad that shares the row.
    float tile_max[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
        float mx = fmaxf(s[mt][0][2 * h], s[mt][0][2 * h + 1]);
#pragma unroll
        for (int nt = 1; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        tile_max[mt][h] = mx * scale_log2;  // scale > 0 (the launcher checks), so the max commutes
      }
    // Rescale O and the sums when the running max moves. Lazy: keep the old offset while every
    // row of the warp stays within 2^kLazyLog2 of it (P then lies in [0, 2^8], still exact to
    // fp16/bf16 rounding); one warp vote keeps the branch uniform. The first tile always rescales
    // (the offset starts at -inf).
    bool rescale = true;
    if constexpr (C::kLazy) {
      bool grow = false;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) grow |= tile_max[mt][h] > row_max[mt][h] + C::kLazyLog2;
      rescale = __any_sync(0xffffffffu, grow);
    }
    if (rescale) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // A row with no visible key yet keeps max -inf and alpha 1 (nothing to rescale); every
          // row sees key 0 in tile 0, so this only guards against NaN from -inf - -inf.
          const float m_new = fmaxf(row_max[mt][h], tile_max[mt][h]);
          const float alpha = (m_new == -INFINITY) ? 1.f : lab_exp2(row_max[mt][h] - m_new);
          row_max[mt][h] = m_new;
          row_sum[mt][h] *= alpha;
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt) {
            o_acc[mt][dt][2 * h] *= alpha;
            o_acc[mt][dt][2 * h + 1] *= alpha;
          }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m_off = (row_max[mt][h] == -INFINITY) ? 0.f : row_max[mt][h];  // masked: ex2(-inf) = 0
        float sum0 = 0.f, sum1 = 0.f;  // two chains: half the dependent FADD latency
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          const float p0 = lab_exp2(fmaf(s[mt][nt][2 * h], scale_log2, -m_off));
          const float p1 = lab_exp2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -m_off));
          s[mt][nt][2 * h] = p0;
          s[mt][nt][2 * h + 1] = p1;
          sum0 += p0;
          sum1 += p1;
        }
        row_sum[mt][h] += sum0 + sum1;
      }
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        p_frag[mt][kk][0] = lab_pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p_frag[mt][kk][1] = lab_pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p_frag[mt][kk][2] = lab_pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p_frag[mt][kk][3] = lab_pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    }

    }  // warp_active (S, mask, softmax)

    lab_cp_async_wait<2>();  // V_j landed (K_{j+1}, V_{j+1} may be in flight)
    __syncthreads();

    // O += P V_j.
    if (warp_active) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        lab_ldmatrix_x4_trans(b, s_v + v_off + dp * 32 + kk * 16 * RB);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          lab_mma_m16n8k16<T>(o_acc[mt][2 * dp], p_frag[mt][kk], b[0], b[1]);
          lab_mma_m16n8k16<T>(o_acc[mt][2 * dp + 1], p_frag[mt][kk], b[2], b[3]);
        }
      }
    }
    }  // warp_active (P V)
  };

  // Tiles [0, n_full) need no mask for any row of this CTA: inside the keys (n0 + BN <= nk) and,
  // causal, left of the block's first row (n0 + BN - 1 <= m0).
  const int n_full = !C::kSplit ? 0 : min(n_tiles, CAUSAL ? min(nk / BN, (m0 + 1) / BN) : nk / BN);
  int j = 0;
  for (; j < n_full; ++j) tile_step(j, std::false_type{});
  for (; j < n_tiles; ++j) tile_step(j, std::true_type{});

  // Epilogue: O / l, staged through shared memory (this warp's rows of the Q tile) so that the
  // global stores are 16 bytes per lane and consecutive lanes write consecutive chunks of a row.
  lab_cp_async_wait<0>();
  __syncthreads();  // the Q tile may alias stage 1, which other warps may still be reading
  uint8_t* s_o = smem + C::kQOffset;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.f / l;
      const int row = warp * C::kWarpRows + mt * 16 + (lane >> 2) + h * 8;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<uint32_t*>(s_o + row * RB + dt * 16 + (lane & 3) * 4) =
            lab_pack2<T>(o_acc[mt][dt][2 * h] * inv, o_acc[mt][dt][2 * h + 1] * inv);
    }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < C::kWarpRows * C::kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int row = warp * C::kWarpRows + idx / C::kChunks, c = idx % C::kChunks;
    if (m0 + row < nq)
      *reinterpret_cast<uint4*>(o + (size_t)row * D + c * 8) = *reinterpret_cast<const uint4*>(s_o + row * RB + c * 16);
  }
}

template <class C, typename T, bool CAUSAL>
const char* launch_one(const LabAttentionArgs* a, cudaStream_t stream) {
  auto kernel = fwd_kernel<C, T, CAUSAL>;
  static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  const int bh = a->batch * a->heads;
  const int m_blocks = lab_cdiv(a->seqlen_q, C::BM);
  dim3 grid(m_blocks, bh);
  if (CAUSAL && C::kHeavyFirst) {
    if ((long long)m_blocks * bh > 0x7fffffffLL) return "v5: too many query blocks for one launch";
    grid = dim3(m_blocks * bh);
  } else if (bh > 65535) {
    return "v5: batch*heads must be <= 65535 (grid y limit)";
  }
  const float scale_log2 = a->softmax_scale * 1.4426950408889634f;  // exp(x) = 2^(x log2 e)
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(
      static_cast<const T*>(a->q), static_cast<const T*>(a->k), static_cast<const T*>(a->v),
      static_cast<T*>(a->o), a->seqlen_q, a->seqlen_k, bh, scale_log2);
  return lab_last_launch_error();
}

template <class C, bool CAUSAL>
const char* launch(const LabAttentionArgs* a, cudaStream_t stream) {
  switch (a->dtype) {
    case LAB_FLOAT16: return launch_one<C, __half, CAUSAL>(a, stream);
    case LAB_BFLOAT16: return launch_one<C, __nv_bfloat16, CAUSAL>(a, stream);
    default: return "v5 supports float16 and bfloat16 only (tensor-core rung); use --dtype float16";
  }
}

// The configurations the launcher uses (picked by measurement; benchmarks/v5_notes.md has the
// runs): 4 warps x 32 query rows, 64-key tiles, lazy rescale, split key loop, causal longest-first.
//                     D  warps MT  BN  Q in regs  min CTAs/SM  lazy rescale
using Default64 = Config<64, 4, 2, 64, true, 2, true>;
using Default128 = Config<128, 4, 2, 64, false, 2, true>;

#ifdef LAB_TUNING
// Candidate configurations for `lab tune --variant v5` (the tuning contract of common.cuh), fp16 and
// bf16; the launcher's own choice (Default64/128 above) is timed beside them as "default".
//   W warps, MT 16-row m-tiles per warp, BN keys per tile, Q in registers or shared memory,
//   lazy: rescale O only when a row max grows by > 2^8, split: a mask-free steady loop.
template <class C>
const char* launch_any(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? launch<C, true>(a, stream) : launch<C, false>(a, stream);
}
static const LabTuneCandidate kCandidates64[] = {
    {"W4 MT2 BN64 Qregs split", launch_any<Config<64, 4, 2, 64, true, 2, false>>},
    {"W4 MT2 BN64 Qregs lazy split", launch_any<Config<64, 4, 2, 64, true, 2, true>>},
    {"W4 MT2 BN128 Qsmem lazy split", launch_any<Config<64, 4, 2, 128, false, 2, true>>},
    {"W4 MT2 BN128 Qsmem lazy", launch_any<Config<64, 4, 2, 128, false, 2, true, true, false>>},
    {"W4 MT2 BN64 Qregs", launch_any<Config<64, 4, 2, 64, true, 2, false, true, false>>},
};
static const LabTuneCandidate kCandidates128[] = {
    {"W4 MT2 BN64 Qsmem lazy split", launch_any<Config<128, 4, 2, 64, false, 2, true>>},
    {"W4 MT2 BN64 Qsmem split", launch_any<Config<128, 4, 2, 64, false, 2, false>>},
    {"W4 MT2 BN64 Qsmem lazy", launch_any<Config<128, 4, 2, 64, false, 2, true, true, false>>},
    {"W4 MT2 BN64 Qsmem", launch_any<Config<128, 4, 2, 64, false, 2, false, true, false>>},
};
static LabTuneList candidates(int head_dim) {
  switch (head_dim) {
    case 64: return lab_tune_list(kCandidates64);
    case 128: return lab_tune_list(kCandidates128);
    default: return {nullptr, 0};
  }
}
#endif

}  // namespace v5

static const char* refuse(const LabAttentionArgs* args) {
  if (args->head_dim != 64 && args->head_dim != 128) return "v5 supports head_dim 64 and 128";
  if (args->seqlen_q < 1 || args->seqlen_k < 1) return "v5 needs seqlen_q >= 1 and seqlen_k >= 1";
  // The row max is taken on raw scores and scaled afterwards, which needs a positive scale.
  if (!(args->softmax_scale > 0.f)) return "v5 needs softmax_scale > 0";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v5(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args)) return why;
  if (args->head_dim == 64)
    return args->causal ? v5::launch<v5::Default64, true>(args, stream) : v5::launch<v5::Default64, false>(args, stream);
  return args->causal ? v5::launch<v5::Default128, true>(args, stream) : v5::launch<v5::Default128, false>(args, stream);
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v5_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(v5::candidates(head_dim));
}
LAB_EXPORT const char* lab_forward_v5_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args)) return why;
  return lab_tune_launch(v5::candidates(args->head_dim), args, stream, config);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v5"
// slug = "mma"
// title = "Tensor cores: FlashAttention-2 with mma.sync m16n8k16, fp16/bf16 in, fp32 accumulate"
// dtypes = ["float16", "bfloat16"]
// head_dims = [64, 128]
// min_cc = "8.0"             # mma.sync m16n8k16 with bf16, ldmatrix, cp.async
// attacks = ["compute-bound"]
// grid = "q-tiles,bh"        # non-causal: batch*heads on grid.y (<= 65535, refused above); causal: one flat
//                            # longest-first grid
// aligned16 = false          # its 16-byte loads need aligned tensors, but the launcher does not check
// lab:end
