// v7_mma_bwd: v5's mma.sync forward, now writing the row log-sum-exp, and a FlashAttention-2
// backward on mma.sync m16n8k16 (fp16 and bf16, head dims 64 and 128, causal and not).
//
// What changed since v5/v6: the lab gains a backward rung. The forward is v5's kernel unchanged
//   (same configurations, same speed) except that it also stores LSE = (running max + log2 l) ln 2
//   per query row when the lab asks for it. The backward is FlashAttention-2's: (a) a preprocess
//   kernel computes D = rowsum(dO * O), the LSE in log2 units, and zeroes an fp32 dQ accumulator
//   (all in the rung's workspace); (b) the main kernel runs one CTA per (key block, b, h), holds
//   K_j and V_j in shared memory and dK_j, dV_j in fp32 registers, and walks the query blocks
//   (Q_i, dO_i and the row statistics double-buffered by cp.async), recomputing P from the LSE
//   instead of storing it; each warp computes its keys' tiles transposed (S^T = K Q^T,
//   dP^T = V dO^T), so P^T and dS^T leave the accumulators already as A fragments of
//   dV += P^T dO and dK += dS^T Q (B operands by ldmatrix.trans); dS^T goes through shared memory
//   once for dQ += dS K, which every CTA adds into the fp32 accumulator with vectorised global
//   reductions (float2 atomicAdd: red.global.add.v2.f32 on sm_90); (c) a convert kernel scales dQ
//   and casts it to fp16/bf16. Block sizes per head dim: 8 warps x 16 keys = 128-key blocks,
//   64-query steps.
// Bottleneck it attacks: the lab had no backward rung at all: `lab sweep --mode bwd` had SDPA's
//   backward only, every rung row read "no backward launcher". The reference it must meet is
//   FA2's backward (../shared/DEVICE.md, H200, fp16, fa-grid: 87-299 TFLOP/s, cuDNN 129-517):
//   under ncu it is three kernels (dot(dO, O), the dQ/dK/dV loop, dQ convert), its main loop at
//   255 registers per thread with local-memory (spill) traffic, and it keeps P and dS in shared
//   memory for all three gradient products. v7 keeps P^T and dS^T in registers for dV and dK
//   (shared-memory traffic for the A operands of two of the five products disappears) and sizes
//   the tiles so the dK/dV accumulators fit without spilling.
// Predicted gain (written before measuring): against FA2's backward, 1.0-1.2x across the fa-grid
//   (same algorithm and tensor-core instruction; fewer shared-memory round trips and no spills
//   on one side, more dQ reduction traffic with 128-key blocks at D=64 on the other), the weakest
//   cells at short N (few key blocks per head: the three-kernel overhead and the causal
//   triangle's imbalance) and at D=128 N=16384 (dQ reductions: nk/128 x nq x D x 4 bytes per head).
// Measured (NVIDIA H100 80GB HBM3 -- the device tool gave no H200 -- 2026-11-25, commit ea2c755;
//   benchmarks/v7_dev.py bench: CUDA events, L2 flushed, median of 20, side by side with SDPA's FA2
//   and cuDNN backends; fa-grid, 16k tokens, hidden 2048), backward TFLOP/s and v7 / FA2, fp16:
//     D=64:  N=512 175 (1.24x), causal 124 (1.46x); N=4096 225 (0.89x), causal 213 (1.01x);
//            N=16384 234 (0.83x), causal 238 (0.91x)
//     D=128: N=512 176 (1.28x), causal 127 (1.56x); N=4096 241 (0.89x), causal 221 (0.97x);
//            N=16384 255 (0.85x), causal 254 (0.86x)
//   >= FA2 in 21 of 48 cells (fp16 and bf16 alike): ahead at N <= 1024 (and causal to 2048-4096),
//   10-17% behind in the steady state of long sequences, where FA2 reaches 263-300 TFLOP/s; cuDNN is
//   1.7-2x faster than v7 there. The prediction missed the long-N cells; deferring dQ (one barrier
//   per step) and 2 CTAs of 4 warps did not close the gap (tuning candidates, measured in
//   benchmarks/v7_notes.md, which estimates the loop shared-memory-bandwidth bound: 184 ldmatrix.x4
//   per 320 mma.sync per warp and step). Correct on all 56 shapes of the check (O, LSE, dQ, dK,
//   dV within 2x SDPA's error against float64 autograd); compute-sanitizer memcheck and racecheck
//   clean. ptxas: 255 registers at D=128, 223-227 at D=64, no spills.
//   The stored sweep profiles/examples/20261125-210729-sweep-fa-grid-v7-bwd (`lab sweep --preset
//   fa-grid --mode bwd`, H100 again, 2026-11-25) agrees: >= FA2 in 20 of 48 cells (0.83-1.42x), 0.47-1.09x
//   cuDNN; fwd+bwd (...-fwdbwd, fp16) >= FA2 in 9 of 24. The lab's profile of the backward
//   (profiles/examples/20261125-211819-v7-B4-H16-N2048-D128-float16) confirms the estimate: the main
//   kernel (95% of the time) is memory-bound on L1TEX at 73% (shared-memory operand wavefronts; short
//   scoreboard and MIO-throttle stalls), tensor pipe 38% busy: cut ldmatrix traffic next.
// Profile it: lab profile --variant v7 --dtype float16 --mode bwd
//
// Layout of one backward CTA (default: 8 warps, BC = 128 keys, BR = 64 queries per step):
//
//   K_j, V_j [BC x D] smem (whole loop)      Q_i, dO_i [BR x D] smem, two cp.async stages
//   warp w: keys 16w..16w+15                 every warp reads all BR rows (ldmatrix / .trans)
//     S^T  = K_w Q_i^T        [16 x BR] fp32 regs
//     dP^T = V_w dO_i^T       [16 x BR] fp32 regs
//     P^T  = 2^(S^T * scale log2e - LSE2_i),  dS^T = P^T * (dP^T - D_i)
//     dV_w += P^T dO_i        [16 x D] fp32 regs (A = P^T re-packed, no smem)
//     dK_w += dS^T Q_i        [16 x D] fp32 regs (A = dS^T re-packed, no smem)
//     dS^T -> smem [BC x BR]; barrier
//     dQ_i += dS K_j: warp (mq, group) takes 16 query rows x D/groups columns -> RED.v2 to fp32 global
//
// The forward's layout is v5's (see lab/kernels/v5_mma.cu's header); only its epilogue differs.
#include "common.cuh"
#include "bwd_prepost.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace v7 {

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
           float* __restrict__ lse,  // [B*H, nq] natural-log row log-sum-exp, or nullptr (no backward to feed)
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
      // The backward's statistic: log sum_j exp(scale q.k_j) = (offset + log2 l) * ln 2, where the
      // offset is the (lazy) running max in log2 units that every exponent above subtracted.
      if (lse != nullptr && (lane & 3) == 0 && m0 + row < nq)
        lse[bh * nq + m0 + row] = (row_max[mt][h] + __log2f(l)) * 0.6931471805599453f;
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
    if ((long long)m_blocks * bh > 0x7fffffffLL) return "v7: too many query blocks for one launch";
    grid = dim3(m_blocks * bh);
  } else if (bh > 65535) {
    return "v7: batch*heads must be <= 65535 (grid y limit)";
  }
  const float scale_log2 = a->softmax_scale * 1.4426950408889634f;  // exp(x) = 2^(x log2 e)
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(
      static_cast<const T*>(a->q), static_cast<const T*>(a->k), static_cast<const T*>(a->v),
      static_cast<T*>(a->o), a->lse, a->seqlen_q, a->seqlen_k, bh, scale_log2);
  return lab_last_launch_error();
}

template <class C, bool CAUSAL>
const char* launch(const LabAttentionArgs* a, cudaStream_t stream) {
  switch (a->dtype) {
    case LAB_FLOAT16: return launch_one<C, __half, CAUSAL>(a, stream);
    case LAB_BFLOAT16: return launch_one<C, __nv_bfloat16, CAUSAL>(a, stream);
    default: return "v7 supports float16 and bfloat16 only (tensor-core rung); use --dtype float16";
  }
}

// =============================================================================================
// Backward (FlashAttention-2's algorithm on mma.sync). Notation: s = scale * q.k, P = softmax(s)
// row-wise, dP = dO V^T, D_i = rowsum(dO_i * O_i), dS = P * (dP - D), and
//   dV = P^T dO,   dK = scale * dS^T Q,   dQ = scale * dS K.
// Three kernels on the stream: preprocess (D, the LSE in log2 units, dQ accumulator zeroed),
// the main loop (one CTA per key block), convert (dQ fp32 -> fp16/bf16).
// =============================================================================================

// The workspace, preprocess (a), convert (c) and the dQ reduction: bwd_prepost.cuh (shared by the
// backward rungs).
using lab_bwd::kMaxQueryBlock;
using lab_bwd::Workspace;
using lab_bwd::workspace_bytes;
using lab_bwd::bwd_preprocess_kernel;
using lab_bwd::bwd_convert_kernel;
using lab_bwd::red_add2;


// (b) The main loop's tile configuration. Every warp owns 16 keys (one m16 tile), so a CTA holds a
// key block of BC = 16 x warps keys; it walks the query blocks of BR rows.
//   D: head dim; WARPS: warps per CTA; BR: query rows per step; MIN_BLOCKS: CTAs per SM to fit;
//   DEFER_DQ: compute dQ of query block i in step i+1 from a second dS^T buffer (one barrier per
//   step instead of two), rather than behind a barrier at the end of step i.
template <int D_, int WARPS_, int BR_, int MIN_BLOCKS_, bool DEFER_DQ_ = false>
struct BwdConfig {
  static constexpr int D = D_, kWarps = WARPS_, BR = BR_, kMinBlocks = MIN_BLOCKS_;
  static constexpr bool kDeferDq = DEFER_DQ_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int BC = 16 * kWarps;
  static constexpr int kRowBytes = D * 2 + 16;       // K, V, Q, dO rows: one 16-byte chunk of padding
  static constexpr int kDsRowBytes = BR * 2 + 16;    // dS^T rows (keys) of BR queries, padded the same way
  static constexpr int kTileKVBytes = BC * kRowBytes;
  static constexpr int kTileQBytes = BR * kRowBytes;
  // dQ = dS K: the BR query rows split into m16 tiles, the D columns into groups, one warp each.
  static constexpr int kMTilesQ = BR / 16;
  static constexpr int kDqGroups = kWarps / kMTilesQ;
  static constexpr int kDqCols = D / kDqGroups;
  // Shared memory: [K][V][Q x2 stages][dO x2][lse2 x2][D x2][dS^T] (deferred dQ: two dS^T buffers,
  // block i's read for dQ_i in step i+1 while step i+1 writes the other)
  static constexpr int kOffK = 0, kOffV = kTileKVBytes, kOffQ = 2 * kTileKVBytes;
  static constexpr int kOffDO = kOffQ + 2 * kTileQBytes;
  static constexpr int kOffL = kOffDO + 2 * kTileQBytes;
  static constexpr int kOffDsum = kOffL + 2 * BR * 4;
  static constexpr int kOffDS = kOffDsum + 2 * BR * 4;
  static constexpr int kTileDsBytes = BC * kDsRowBytes;
  static constexpr int kDsBuffers = kDeferDq ? 2 : 1;
  static constexpr int kSmemBytes = kOffDS + kDsBuffers * kTileDsBytes;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BR % 16 == 0 && BR <= kMaxQueryBlock, "query block: whole m16 tiles, within the padding");
  static_assert(kWarps % kMTilesQ == 0 && kDqCols % 16 == 0, "dQ tiles must split evenly over the warps");
  static_assert(BR / 2 <= kThreads, "the row statistics are copied by one 16-byte chunk per thread");
};

// One CTA: key block n_block of head bh. K_j, V_j stay in shared memory; dK_j, dV_j accumulate in
// fp32 registers (warp w: keys 16w..16w+15, all D columns); Q_i, dO_i and the row statistics of
// query block i stream through two stages of cp.async. Per query block, warp w computes the
// transposed tiles S^T = K_w Q_i^T and dP^T = V_w dO_i^T (keys as the MMA's M, so that P^T and
// dS^T come out of the accumulators already in the A-fragment layout of dV += P^T dO and
// dK += dS^T Q: no shared-memory round trip for those two products). dQ_i += dS K_j needs dS with
// queries as M, so dS^T goes through shared memory once and every warp reads its dQ tile back
// with ldmatrix.trans, then adds it into the fp32 accumulator in global memory.
template <class C, typename T, bool CAUSAL>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
bwd_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
           const float* __restrict__ lse2, const float* __restrict__ dsum, float* __restrict__ dq_acc,
           T* __restrict__ dk, T* __restrict__ dv, int nq, int nk, int nq_pad, float scale_log2, float scale) {
  constexpr int D = C::D, BR = C::BR, BC = C::BC, RB = C::kRowBytes, RBS = C::kDsRowBytes;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c2 = 2 * (lane & 3);  // accumulator row (and row + 8) and column pair
  const int n0 = blockIdx.x * BC;
  const size_t bh = blockIdx.y;
  q += bh * nq * D;
  dout += bh * nq * D;
  dq_acc += bh * nq * D;
  k += (bh * nk + n0) * D;
  v += (bh * nk + n0) * D;
  dk += (bh * nk + n0) * D;
  dv += (bh * nk + n0) * D;
  lse2 += bh * nq_pad;
  dsum += bh * nq_pad;

  const uint32_t s_base = lab_smem_addr(smem);
  const uint32_t s_k = s_base + C::kOffK, s_v = s_base + C::kOffV, s_ds = s_base + C::kOffDS;
  // ldmatrix lane offsets (the same four patterns as the forward's, see its header):
  //   A from a row-major [M][K] tile (K_w, V_w): rows lane&15, k-half lane>>4.
  const uint32_t a_off = (warp * 16 + (lane & 15)) * RB + (lane >> 4) * 16;
  //   B from an [N][K] tile (Q, dO as the N = queries side of S^T, dP^T).
  const uint32_t b_off = ((lane & 7) + ((lane >> 4) << 3)) * RB + ((lane >> 3) & 1) * 16;
  //   B from a [K][N] tile, transposed (dO, Q as the K = queries side of dV, dK; K_j for dQ).
  const uint32_t bt_off = ((lane & 7) + (((lane >> 3) & 1) << 3)) * RB + (lane >> 4) * 16;
  //   A from dS^T [keys][queries], transposed into dS [queries][keys]: matrix i = lane>>3 covers
  //   keys 8*(i>>1).., queries 8*(i&1)..; warp's m16 tile of queries mq.
  const int mq = warp % C::kMTilesQ, dgrp = warp / C::kMTilesQ;
  const uint32_t dsa_off = ((lane & 7) + ((lane >> 4) << 3)) * RBS + (mq * 16 + ((lane >> 3) & 1) * 8) * 2;

  const int m_blocks = lab_cdiv(nq, BR);
  // Top-left causal (as the forward: query i sees keys j <= i): query blocks before n0 see none of
  // this key block's keys.
  const int m_first = CAUSAL ? n0 / BR : 0;
  // From m_full on, every (query, key) pair of the tile is visible: no mask. Ragged key blocks
  // (keys >= nk, zero-filled) mask everywhere, so a padded key never meets an overflowing exponent.
  int m_full = CAUSAL ? lab_cdiv(n0 + BC - 1, BR) : 0;
  if (n0 + BC > nk) m_full = m_blocks;
  m_full = min(max(m_full, m_first), m_blocks);

  // Prologue: K_j, V_j, then query block m_first in stage 0 (one group each).
  const CopyPlan<D, C::kThreads> plan(tid);
  plan.template copy<BC>(s_k, k, nk - n0);
  plan.template copy<BC>(s_v, v, nk - n0);
  lab_cp_async_commit();
  auto load_q_block = [&](int m, int stage) {
    const int m0 = m * BR;
    plan.template copy<BR>(s_base + C::kOffQ + stage * C::kTileQBytes, q + (size_t)m0 * D, nq - m0);
    plan.template copy<BR>(s_base + C::kOffDO + stage * C::kTileQBytes, dout + (size_t)m0 * D, nq - m0);
    if (tid < BR / 4)
      lab_cp_async_16(s_base + C::kOffL + stage * BR * 4 + tid * 16, lse2 + m0 + tid * 4);
    else if (tid < BR / 2)
      lab_cp_async_16(s_base + C::kOffDsum + stage * BR * 4 + (tid - BR / 4) * 16, dsum + m0 + (tid - BR / 4) * 4);
  };
  if (m_first < m_blocks) load_q_block(m_first, 0);
  lab_cp_async_commit();

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[dt][e] = dv_acc[dt][e] = 0.f;

  const int kw0 = n0 + warp * 16;  // this warp's first key

  // dQ_i (partial over this key block) = dS_i K_j, from dS^T of query block i in buffer `buf`:
  // warp (mq, dgrp) owns query rows 16 mq.. of the block and D columns kDqCols * dgrp..; k = the BC
  // keys. Causal, masked blocks: key steps right of the tile's last query hold zeros and are skipped.
  auto dq_step = [&](const int m, const int buf, auto masked_tag) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const int q_lo = m * BR + mq * 16;
    if (q_lo >= nq) return;
    const int kk_end = (kMasked && CAUSAL) ? min(BC / 16, lab_cdiv(q_lo + 16 - n0, 16)) : BC / 16;
    if (kk_end <= 0) return;
    const uint32_t s_dsb = s_ds + buf * C::kTileDsBytes;
    float acc[C::kDqCols / 8][4];
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      if (kk < kk_end) {
        uint32_t a[4];
        lab_ldmatrix_x4_trans(a, s_dsb + dsa_off + kk * 16 * RBS);
#pragma unroll
        for (int dp = 0; dp < C::kDqCols / 16; ++dp) {
          uint32_t b[4];
          lab_ldmatrix_x4_trans(b, s_k + bt_off + (dgrp * C::kDqCols + dp * 16) * 2 + kk * 16 * RB);
          if (kk == 0) {
            lab_mma_m16n8k16_zero_acc<T>(acc[2 * dp], a, b[0], b[1]);
            lab_mma_m16n8k16_zero_acc<T>(acc[2 * dp + 1], a, b[2], b[3]);
          } else {
            lab_mma_m16n8k16<T>(acc[2 * dp], a, b[0], b[1]);
            lab_mma_m16n8k16<T>(acc[2 * dp + 1], a, b[2], b[3]);
          }
        }
      }
    }
    // Into the fp32 accumulator in global memory: the other key blocks' CTAs add into the same
    // rows, so these are reductions (RED, no return value), two floats each.
    float* row_g = dq_acc + (size_t)(q_lo + g) * D + dgrp * C::kDqCols + c2;
    const bool ok_g = q_lo + g < nq, ok_g8 = q_lo + g + 8 < nq;
#pragma unroll
    for (int nt = 0; nt < C::kDqCols / 8; ++nt) {
      if (ok_g) red_add2(row_g + nt * 8, acc[nt][0], acc[nt][1]);
      if (ok_g8) red_add2(row_g + 8 * D + nt * 8, acc[nt][2], acc[nt][3]);
    }
  };

  auto step = [&](const int m, const int stage, auto masked_tag) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    lab_cp_async_wait<0>();  // query block m (and, the first time, K_j and V_j) landed
    // Visible to every warp; every warp is done with the other stage and has read the dS^T buffer
    // this step writes (deferred: block m-2's; otherwise block m-1's).
    __syncthreads();
    if (m + 1 < m_blocks) load_q_block(m + 1, stage ^ 1);
    lab_cp_async_commit();
    // Deferred: dQ of the previous query block, whose dS^T (the other buffer) is complete since the
    // barrier; warps drift apart, one warp's dQ products overlapping another's exponentials.
    // (Its causal skip is computed at run time: the previous block may or may not be masked.)
    if constexpr (C::kDeferDq)
      if (m > m_first) dq_step(m - 1, stage ^ 1, std::true_type{});
    const int ds_buf = C::kDeferDq ? stage : 0;

    const int m0 = m * BR;
    const uint32_t s_q = s_base + C::kOffQ + stage * C::kTileQBytes;
    const uint32_t s_do = s_base + C::kOffDO + stage * C::kTileQBytes;
    const float* s_l = reinterpret_cast<const float*>(smem + C::kOffL) + stage * BR;
    const float* s_dd = reinterpret_cast<const float*>(smem + C::kOffDsum) + stage * BR;
    // Causal: a warp whose keys all lie right of every query of the block has nothing to add.
    const bool active = !kMasked || !CAUSAL || m0 + BR - 1 >= kw0;
    if (active) {
      // S^T = K_w Q^T and dP^T = V_w dO^T: [16 keys x BR queries], k-step 0 from zero.
      float st[BR / 8][4], dpt[BR / 8][4];
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        lab_ldmatrix_x4(a, s_k + a_off + kk * 32);
#pragma unroll
        for (int p = 0; p < BR / 16; ++p) {
          uint32_t b[4];
          lab_ldmatrix_x4(b, s_q + b_off + kk * 32 + p * 16 * RB);
          if (kk == 0) {
            lab_mma_m16n8k16_zero_acc<T>(st[2 * p], a, b[0], b[1]);
            lab_mma_m16n8k16_zero_acc<T>(st[2 * p + 1], a, b[2], b[3]);
          } else {
            lab_mma_m16n8k16<T>(st[2 * p], a, b[0], b[1]);
            lab_mma_m16n8k16<T>(st[2 * p + 1], a, b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        lab_ldmatrix_x4(a, s_v + a_off + kk * 32);
#pragma unroll
        for (int p = 0; p < BR / 16; ++p) {
          uint32_t b[4];
          lab_ldmatrix_x4(b, s_do + b_off + kk * 32 + p * 16 * RB);
          if (kk == 0) {
            lab_mma_m16n8k16_zero_acc<T>(dpt[2 * p], a, b[0], b[1]);
            lab_mma_m16n8k16_zero_acc<T>(dpt[2 * p + 1], a, b[2], b[3]);
          } else {
            lab_mma_m16n8k16<T>(dpt[2 * p], a, b[0], b[1]);
            lab_mma_m16n8k16<T>(dpt[2 * p + 1], a, b[2], b[3]);
          }
        }
      }
      // P^T = 2^(s * scale * log2e - lse2) recomputed from the forward's LSE (no running max: the
      // LSE already normalises), masked where the key is padding or, causal, right of the query;
      // dS^T = P^T * (dP^T - D). Both re-packed to 16 bits as A fragments.
      uint32_t p_frag[BR / 16][4], ds_frag[BR / 16][4];
#pragma unroll
      for (int nt = 0; nt < BR / 8; ++nt) {
        const float2 l = *reinterpret_cast<const float2*>(s_l + nt * 8 + c2);
        const float2 dd = *reinterpret_cast<const float2*>(s_dd + nt * 8 + c2);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = lab_exp2(fmaf(st[nt][e], scale_log2, -((e & 1) ? l.y : l.x)));
          if constexpr (kMasked) {
            const int key = kw0 + g + (e >> 1) * 8, qi = m0 + nt * 8 + c2 + (e & 1);
            if (key >= nk || (CAUSAL && key > qi)) p = 0.f;
          }
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - ((e & 1) ? dd.y : dd.x));
        }
      }
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk) {
        p_frag[kk][0] = lab_pack2<T>(st[2 * kk][0], st[2 * kk][1]);
        p_frag[kk][1] = lab_pack2<T>(st[2 * kk][2], st[2 * kk][3]);
        p_frag[kk][2] = lab_pack2<T>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
        p_frag[kk][3] = lab_pack2<T>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
        ds_frag[kk][0] = lab_pack2<T>(dpt[2 * kk][0], dpt[2 * kk][1]);
        ds_frag[kk][1] = lab_pack2<T>(dpt[2 * kk][2], dpt[2 * kk][3]);
        ds_frag[kk][2] = lab_pack2<T>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
        ds_frag[kk][3] = lab_pack2<T>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
      }
      // dS^T -> shared memory: every warp reads it back for dQ.
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk) {
        uint8_t* row_g = smem + C::kOffDS + ds_buf * C::kTileDsBytes + (warp * 16 + g) * RBS + (kk * 16 + c2) * 2;
        *reinterpret_cast<uint32_t*>(row_g) = ds_frag[kk][0];
        *reinterpret_cast<uint32_t*>(row_g + 8 * RBS) = ds_frag[kk][1];
        *reinterpret_cast<uint32_t*>(row_g + 16) = ds_frag[kk][2];
        *reinterpret_cast<uint32_t*>(row_g + 8 * RBS + 16) = ds_frag[kk][3];
      }
      // dV += P^T dO, dK += dS^T Q: [16 keys x D], k = the BR queries.
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk)
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          lab_ldmatrix_x4_trans(b, s_do + bt_off + dp * 32 + kk * 16 * RB);
          lab_mma_m16n8k16<T>(dv_acc[2 * dp], p_frag[kk], b[0], b[1]);
          lab_mma_m16n8k16<T>(dv_acc[2 * dp + 1], p_frag[kk], b[2], b[3]);
        }
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk)
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          lab_ldmatrix_x4_trans(b, s_q + bt_off + dp * 32 + kk * 16 * RB);
          lab_mma_m16n8k16<T>(dk_acc[2 * dp], ds_frag[kk], b[0], b[1]);
          lab_mma_m16n8k16<T>(dk_acc[2 * dp + 1], ds_frag[kk], b[2], b[3]);
        }
    } else {
      // Skipped warp: its rows of dS^T are zero for the dQ product.
#pragma unroll
      for (int kk = 0; kk < BR / 16; ++kk) {
        uint8_t* row_g = smem + C::kOffDS + ds_buf * C::kTileDsBytes + (warp * 16 + g) * RBS + (kk * 16 + c2) * 2;
        *reinterpret_cast<uint32_t*>(row_g) = 0u;
        *reinterpret_cast<uint32_t*>(row_g + 8 * RBS) = 0u;
        *reinterpret_cast<uint32_t*>(row_g + 16) = 0u;
        *reinterpret_cast<uint32_t*>(row_g + 8 * RBS + 16) = 0u;
      }
    }
    if constexpr (!C::kDeferDq) {
      __syncthreads();  // dS^T of the whole key block visible
      // dQ_i of this block, as dq_step above (kept inline: this is the default configurations'
      // code as measured, and the lambda call changes their register allocation).
      const int q_lo = m0 + mq * 16;
      if (q_lo < nq) {
        const int kk_end = (kMasked && CAUSAL) ? min(BC / 16, lab_cdiv(q_lo + 16 - n0, 16)) : BC / 16;
        if (kk_end > 0) {
          float acc[C::kDqCols / 8][4];
#pragma unroll
          for (int kk = 0; kk < BC / 16; ++kk) {
            if (kk < kk_end) {
              uint32_t a[4];
              lab_ldmatrix_x4_trans(a, s_ds + dsa_off + kk * 16 * RBS);
#pragma unroll
              for (int dp = 0; dp < C::kDqCols / 16; ++dp) {
                uint32_t b[4];
                lab_ldmatrix_x4_trans(b, s_k + bt_off + (dgrp * C::kDqCols + dp * 16) * 2 + kk * 16 * RB);
                if (kk == 0) {
                  lab_mma_m16n8k16_zero_acc<T>(acc[2 * dp], a, b[0], b[1]);
                  lab_mma_m16n8k16_zero_acc<T>(acc[2 * dp + 1], a, b[2], b[3]);
                } else {
                  lab_mma_m16n8k16<T>(acc[2 * dp], a, b[0], b[1]);
                  lab_mma_m16n8k16<T>(acc[2 * dp + 1], a, b[2], b[3]);
                }
              }
            }
          }
          float* row_g = dq_acc + (size_t)(q_lo + g) * D + dgrp * C::kDqCols + c2;
          const bool ok_g = q_lo + g < nq, ok_g8 = q_lo + g + 8 < nq;
#pragma unroll
          for (int nt = 0; nt < C::kDqCols / 8; ++nt) {
            if (ok_g) red_add2(row_g + nt * 8, acc[nt][0], acc[nt][1]);
            if (ok_g8) red_add2(row_g + 8 * D + nt * 8, acc[nt][2], acc[nt][3]);
          }
        }
      }
    }
  };

  int m = m_first, it = 0;
  for (; m < m_full; ++m, ++it) step(m, it & 1, std::true_type{});
  for (; m < m_blocks; ++m, ++it) step(m, it & 1, std::false_type{});
  if (C::kDeferDq && it > 0) {  // dQ of the last query block
    __syncthreads();
    dq_step(m_blocks - 1, (it - 1) & 1, std::true_type{});
  }

  // Epilogue: dK (times scale) and dV to 16 bits, staged through the K and V tiles (free once every
  // warp has passed this barrier) so that the global stores are 16 bytes per lane, whole rows.
  lab_cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int off = (warp * 16 + g + h * 8) * RB + dt * 16 + c2 * 2;
      *reinterpret_cast<uint32_t*>(smem + C::kOffK + off) =
          lab_pack2<T>(dk_acc[dt][2 * h] * scale, dk_acc[dt][2 * h + 1] * scale);
      *reinterpret_cast<uint32_t*>(smem + C::kOffV + off) = lab_pack2<T>(dv_acc[dt][2 * h], dv_acc[dt][2 * h + 1]);
    }
  __syncthreads();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = 0; i < BC * kChunks / C::kThreads; ++i) {
    const int idx = tid + i * C::kThreads;
    const int row = idx / kChunks, c = idx % kChunks;
    if (n0 + row < nk) {
      *reinterpret_cast<uint4*>(dk + (size_t)row * D + c * 8) = *reinterpret_cast<const uint4*>(smem + C::kOffK + row * RB + c * 16);
      *reinterpret_cast<uint4*>(dv + (size_t)row * D + c * 8) = *reinterpret_cast<const uint4*>(smem + C::kOffV + row * RB + c * 16);
    }
  }
}

template <class C, typename T, bool CAUSAL>
const char* bwd_launch_one(const LabBackwardArgs* a, cudaStream_t stream) {
  Workspace w;
  const size_t need = workspace_bytes(a, &w);
  if (a->workspace == nullptr || a->workspace_bytes < need) return "v7: backward workspace missing or too small";
  const int bh = a->batch * a->heads, nq = a->seqlen_q, nk = a->seqlen_k;
  if (bh > 65535) return "v7: batch*heads must be <= 65535 (grid y limit)";
  constexpr int D = C::D;
  const T* q = static_cast<const T*>(a->q);
  const T* o = static_cast<const T*>(a->o);
  const T* dout = static_cast<const T*>(a->dout);

  constexpr int kPreRows = 256 / (D / 8);
  bwd_preprocess_kernel<T, D><<<dim3(lab_cdiv(w.nq_pad, kPreRows), bh), 256, 0, stream>>>(
      o, dout, a->lse, w.lse2, w.dsum, w.dq_acc, nq, w.nq_pad);
  if (const char* err = lab_last_launch_error()) return err;

  auto kernel = bwd_kernel<C, T, CAUSAL>;
  static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  const float scale = a->softmax_scale, scale_log2 = scale * 1.4426950408889634f;
  kernel<<<dim3(lab_cdiv(nk, C::BC), bh), C::kThreads, C::kSmemBytes, stream>>>(
      q, static_cast<const T*>(a->k), static_cast<const T*>(a->v), dout, w.lse2, w.dsum, w.dq_acc,
      static_cast<T*>(a->dk), static_cast<T*>(a->dv), nq, nk, w.nq_pad, scale_log2, scale);
  if (const char* err = lab_last_launch_error()) return err;

  const size_t n8 = (size_t)bh * nq * D / 8;
  const int blocks = (int)std::min<size_t>((n8 + 255) / 256, 132 * 16);
  bwd_convert_kernel<T><<<blocks, 256, 0, stream>>>(w.dq_acc, static_cast<T*>(a->dq), n8, scale);
  return lab_last_launch_error();
}

template <class C>
const char* bwd_launch(const LabBackwardArgs* a, cudaStream_t stream) {
  const bool causal = a->causal != 0;
  switch (a->dtype) {
    case LAB_FLOAT16:
      return causal ? bwd_launch_one<C, __half, true>(a, stream) : bwd_launch_one<C, __half, false>(a, stream);
    case LAB_BFLOAT16:
      return causal ? bwd_launch_one<C, __nv_bfloat16, true>(a, stream)
                    : bwd_launch_one<C, __nv_bfloat16, false>(a, stream);
    default: return "v7 supports float16 and bfloat16 only (tensor-core rung); use --dtype float16";
  }
}

// The forward's configurations: v5's defaults (benchmarks/v5_notes.md has the runs that chose them).
//                     D  warps MT  BN  Q in regs  min CTAs/SM  lazy rescale
using Default64 = Config<64, 4, 2, 64, true, 2, true>;
using Default128 = Config<128, 4, 2, 64, false, 2, true>;

// The backward's (benchmarks/v7_notes.md): D  warps  BR  min CTAs/SM
using BwdDefault64 = BwdConfig<64, 8, 64, 1>;
using BwdDefault128 = BwdConfig<128, 8, 64, 1>;

#ifdef LAB_TUNING
// Candidates for `lab tune --variant v7` (common.cuh's tuning contract). Forward: v5's two defaults
// only (v7 does not retune v5's kernel). Backward: W warps x 16 keys per key block, BR query rows
// per step, CTAs per SM the registers are sized for.
template <class C>
const char* launch_any(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? launch<C, true>(a, stream) : launch<C, false>(a, stream);
}
static const LabTuneCandidate kCandidates64[] = {{"W4 MT2 BN64 Qregs lazy split", launch_any<Default64>}};
static const LabTuneCandidate kCandidates128[] = {{"W4 MT2 BN64 Qsmem lazy split", launch_any<Default128>}};
static LabTuneList candidates(int head_dim) {
  switch (head_dim) {
    case 64: return lab_tune_list(kCandidates64);
    case 128: return lab_tune_list(kCandidates128);
    default: return {nullptr, 0};
  }
}

struct BwdCandidate {
  const char* label;
  const char* (*launch)(const LabBackwardArgs* args, cudaStream_t stream);
};
static const BwdCandidate kBwdCandidates64[] = {
    {"W8 BC128 BR64", bwd_launch<BwdConfig<64, 8, 64, 1>>},
    {"W8 BC128 BR64 deferred-dQ", bwd_launch<BwdConfig<64, 8, 64, 1, true>>},
    {"W4 BC64 BR64 2/SM deferred-dQ", bwd_launch<BwdConfig<64, 4, 64, 2, true>>},
    {"W8 BC128 BR32 deferred-dQ", bwd_launch<BwdConfig<64, 8, 32, 1, true>>},
};
static const BwdCandidate kBwdCandidates128[] = {
    {"W8 BC128 BR64", bwd_launch<BwdConfig<128, 8, 64, 1>>},
    {"W8 BC128 BR64 deferred-dQ", bwd_launch<BwdConfig<128, 8, 64, 1, true>>},
    {"W8 BC128 BR32 deferred-dQ", bwd_launch<BwdConfig<128, 8, 32, 1, true>>},
};
template <int N>
static const char* bwd_labels(const BwdCandidate (&items)[N]) {
  static thread_local std::string joined;
  joined.clear();
  for (int i = 0; i < N; ++i) {
    if (i) joined += ';';
    joined += items[i].label;
  }
  return joined.c_str();
}
#endif

}  // namespace v7

static const char* refuse(int head_dim, int nq, int nk, float scale) {
  if (head_dim != 64 && head_dim != 128) return "v7 supports head_dim 64 and 128";
  if (nq < 1 || nk < 1) return "v7 needs seqlen_q >= 1 and seqlen_k >= 1";
  // The forward takes the row max on raw scores and scales afterwards, which needs a positive scale.
  if (!(scale > 0.f)) return "v7 needs softmax_scale > 0";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v7(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args->head_dim, args->seqlen_q, args->seqlen_k, args->softmax_scale)) return why;
  if (args->head_dim == 64)
    return args->causal ? v7::launch<v7::Default64, true>(args, stream) : v7::launch<v7::Default64, false>(args, stream);
  return args->causal ? v7::launch<v7::Default128, true>(args, stream) : v7::launch<v7::Default128, false>(args, stream);
}

LAB_EXPORT size_t lab_backward_v7_workspace(const LabBackwardArgs* args) { return v7::workspace_bytes(args); }

LAB_EXPORT const char* lab_backward_v7(const LabBackwardArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args->head_dim, args->seqlen_q, args->seqlen_k, args->softmax_scale)) return why;
  if (args->head_dim == 64) return v7::bwd_launch<v7::BwdDefault64>(args, stream);
  return v7::bwd_launch<v7::BwdDefault128>(args, stream);
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v7_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(v7::candidates(head_dim));
}
LAB_EXPORT const char* lab_forward_v7_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args->head_dim, args->seqlen_q, args->seqlen_k, args->softmax_scale)) return why;
  return lab_tune_launch(v7::candidates(args->head_dim), args, stream, config);
}
LAB_EXPORT const char* lab_backward_v7_configs(int head_dim, LabDtype dtype) {
  if (dtype == LAB_FLOAT32) return "";
  if (head_dim == 64) return v7::bwd_labels(v7::kBwdCandidates64);
  if (head_dim == 128) return v7::bwd_labels(v7::kBwdCandidates128);
  return "";
}
LAB_EXPORT const char* lab_backward_v7_config(const LabBackwardArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args->head_dim, args->seqlen_q, args->seqlen_k, args->softmax_scale)) return why;
  const int n64 = sizeof(v7::kBwdCandidates64) / sizeof(v7::kBwdCandidates64[0]);
  const int n128 = sizeof(v7::kBwdCandidates128) / sizeof(v7::kBwdCandidates128[0]);
  const int n = args->head_dim == 64 ? n64 : n128;
  if (config < 0 || config >= n) return "tuning candidate index out of range for this head_dim and dtype";
  return (args->head_dim == 64 ? v7::kBwdCandidates64 : v7::kBwdCandidates128)[config].launch(args, stream);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v7"
// slug = "mma_bwd"
// title = "Backward: FlashAttention-2's dQ/dK/dV on mma.sync m16n8k16, with v5's forward writing the LSE"
// dtypes = ["float16", "bfloat16"]
// head_dims = [64, 128]
// min_cc = "8.0"             # mma.sync m16n8k16 with bf16, ldmatrix, cp.async
// attacks = ["compute-bound"]
// grid = "q-tiles,bh"        # forward as v5; backward: key blocks on grid.x, batch*heads on grid.y (<= 65535)
// aligned16 = false          # its 16-byte loads need aligned tensors, but the launcher does not check
// backward = true
// lab:end
