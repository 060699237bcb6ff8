// v6_wgmma: FlashAttention forward on Hopper's own instructions (wgmma + TMA, warp-specialised),
// fp16 and bf16 in, fp32 accumulate. sm_90a only (compute capability 9.0; refused elsewhere).
//
// What changed since v5: both matrix products leave mma.sync (HMMA m16n8k16, one warp, operands
//   through ldmatrix into registers) for warpgroup MMAs (wgmma m64nNk16, HGMMA in SASS: 128 threads,
//   B -- and for S = Q K^T also A -- read by the tensor cores straight from shared memory). Tiles
//   arrive by TMA (cp.async.bulk.tensor: one thread, one instruction per 64-column box, completion
//   counted in bytes on an mbarrier, rows past the sequence zero-filled) in the 128-byte-swizzled
//   layout wgmma's descriptors read, into a two-stage ring of K and V tiles with full/empty
//   mbarriers. The CTA is warp-specialised: a producer warpgroup (setmaxnreg 24) issues the copies,
//   1-3 consumer warpgroups (setmaxnreg 232/240/160) own 64 query rows each. In a consumer, tile j's
//   S = Q K_j^T and tile j-1's O += P V are issued together and the softmax of S_j runs while P V
//   is still on the tensor cores (FlashAttention-3's intra-warpgroup overlap); P goes from the S
//   accumulator to wgmma's register A operand without touching shared memory. Causal blocks run
//   longest-first (as v5).
// Bottleneck it attacks: v5's tensor path. Its stored report (profiles/examples/*-v5-*, H200,
//   B8 H16 N1024 D64): tensor pipe 49.6% active, HMMA issue 16.5% of peak, top stall `wait` (the
//   fixed-latency chain ldmatrix -> mma.sync -> softmax), 227 registers and 1 warp per scheduler;
//   on the FlashAttention grid v5 runs at 30-35% of the dense FP16 peak (~990 TFLOP/s) while cuDNN's
//   wgmma kernel reaches 45-65%.
// Predicted gain (written before measuring): 1.3-1.6x over v5 on the FlashAttention grid:
//   450-550 TFLOP/s at D=128, 380-450 at D=64, about SDPA cuDNN's level.
// Measured (NVIDIA H200, 2026-11-23, commit 6e391e6; `lab sweep --variant v5,v6 --preset fa-grid
//   --mode fwd --baselines sdpa-cudnn,sdpa-flash`, profiles/examples/*-sweep-fa-grid-v6, exported into
//   benchmarks/RESULTS.md; fp16, B = 16384/N, H = 2048/D, N = 1024..16384): D=128 498-664 TFLOP/s
//   (50-67% of the dense FP16 peak), 0.91-1.02x SDPA cuDNN non-causal, 0.85-0.99x causal, 1.24-1.89x
//   v5; D=64 264-486 TFLOP/s (27-49%), 0.96-1.08x cuDNN non-causal, 0.84-0.96x causal, 1.10-1.49x v5;
//   1.29-1.97x SDPA's FA2. >= 1.0x cuDNN in 4 of 20 cells (non-causal N >= 8192), >= 1.3x v5 in 13.
//   Short of cuDNN at N <= 2048 (per-CTA prologue and epilogue not hidden: no persistent scheduler)
//   and on causal D=64 (its softmax as long as its products). lab profile (B8 H16 N1024 D64): 1.25x v5.
//   Prediction held at D=128 (above it) and at D=64 for N >= 2048; missed at N = 1024.
// Why raw PTX (common.cuh) and not CuTe: the ladder's rungs are read as one file each, and the
//   wrappers are ~20 short asm blocks whose operands a reader can check against the PTX ISA tables;
//   CuTe would add the CUTLASS headers to the build and hide the layouts this rung is about.
// Profile it: lab profile --variant v6 --dtype float16 --shape 4,16,4096,128
//
// Warpgroup roles in one CTA (D=128: 1 producer + 2 consumers, BM = 128 query rows, BN = 128 keys):
//
//   warpgroup 0: producer (setmaxnreg.dec 24; one elected thread)
//     Q --TMA--> smem Q [BM x D]                        (once; mbarrier q_full)
//     for j: wait k_empty[j%2] -> TMA K_j -> smem K[j%2] (k_full[j%2], expect_tx bytes)
//            wait v_empty[j%2] -> TMA V_j -> smem V[j%2] (v_full[j%2])
//           |                                   ^
//           v full (tx bytes)                   | empty (every consumer thread arrives)
//   warpgroups 1, 2: consumers (setmaxnreg.inc 240), rows m0 + 64*(wg-1) .. +63
//     S_0 = Q K_0^T; softmax; P_0
//     for j = 1 ..:  +-- wgmma S_j = Q K_j^T  (smem x smem, m64n128k16 x D/16)  --+ in flight
//                    +-- wgmma O += P_{j-1} V_{j-1} (regs x smem^T, m64nDk16 x 8) -+ together
//                    wait S_j -> release K slot -> mask, row max, exp2, row sum (under P V)
//                    wait P V -> release V slot -> O *= alpha, P_j = pack(S_j)
//     O += P_last V_last; O /= l; store
//
//   D=64: one consumer warpgroup per CTA (BM = 64, 232 registers) and two CTAs per SM, or, for
//   non-causal problems with seqlen_k >= 8192, three consumers (BM = 192) sharing each K/V tile.
//
//   Shared memory (1024-byte aligned): [Q: D/64 boxes of BM x 128 B][K stage 0, 1][V stage 0, 1],
//   each tile D/64 boxes of 64 columns x rows, 128-byte swizzle (16-byte chunk c of row r stored at
//   chunk c ^ (r % 8)). wgmma descriptors: Q, K K-major (8-row groups 1024 B apart, a k16 step is
//   +32 B inside the atom); V MN-major (64-column atoms BN*128 B apart, a k16 step is +2048 B).
#include "common.cuh"

#include <cmath>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled (the driver entry point, fetched at run time)
#include <type_traits>

namespace v6 {

// One CTA: 128-thread producer warpgroup + kConsumers consumer warpgroups of 64 query rows each.
// BN keys per K/V tile, kStages-deep ring of K and V tiles. kPingPong: the consumer warpgroups
// take turns issuing their matrix products (named barriers), so one's softmax runs while the
// other's products occupy the tensor cores.
template <int D_, int BN_, int STAGES_, bool PINGPONG_ = false, int CONSUMERS_ = 2>
struct Config {
  static constexpr int D = D_, BN = BN_, kStages = STAGES_, kConsumers = CONSUMERS_;
  static constexpr bool kPingPong = PINGPONG_;
  static constexpr int BM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kHalves = D / 64;          // 64-column (128-byte) swizzle atoms across D
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kKVBytes = BN * D * 2;     // one K or V tile
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;
  static constexpr int kSmemBytes = kVOffset + kStages * kKVBytes + 1024;  // + alignment slack
  // Registers: the producer needs few; the consumers hold S, P and O. 24 + 2 x 240 per thread x 128
  // threads = 64,512 of the SM's 65,536.
  // One consumer warpgroup: two CTAs per SM (each CTA's 256 threads start with 128 registers;
  // the producer gives 104 of them to the consumer), so one CTA's prologue and epilogue run under
  // the other's main loop.
  static constexpr int kMinBlocks = kConsumers == 1 ? 2 : 1;
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : 24;
  static constexpr int kConsumerRegs = kConsumers == 1 ? 232 : kConsumers == 2 ? 240 : 160;
  static constexpr int kHeadGroup = 32;  // causal longest-first order walks heads in groups (as v5)
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BN == 64 || BN == 128, "key tile of 64 or 128");
  static_assert(!kPingPong || kConsumers == 2, "ping-pong alternates two consumer warpgroups");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};

template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (N == 64) lab_wgmma_ss_m64n64k16<T>(d, da, db, scale_d);
  else lab_wgmma_ss_m64n128k16<T>(d, da, db, scale_d);
}
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (N == 64) lab_wgmma_rs_m64n64k16_tb<T>(d, a, db, 1);
  else lab_wgmma_rs_m64n128k16_tb<T>(d, a, db, 1);
}

template <class C, typename T, bool CAUSAL>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
fwd_kernel(const __grid_constant__ CUtensorMap tm_q,  // [B*H, nq, D] in boxes of [BM rows, 64 cols]
           const __grid_constant__ CUtensorMap tm_k,  // [B*H, nk, D] in boxes of [BN rows, 64 cols]
           const __grid_constant__ CUtensorMap tm_v,  // [B*H, nk, D] in boxes of [BN rows, 64 cols]
           T* __restrict__ o,                         // [B*H, nq, D]
           int nq, int nk, int bh_total, float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = C::D, BN = C::BN, BM = C::BM, S = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  // Barriers: [0] Q landed; per stage s: K full, K empty, V full, V empty.
  __shared__ __align__(8) uint64_t bars[1 + 4 * S];

  const int tid = threadIdx.x;
  int m_block, bh_index;
  if constexpr (CAUSAL) {
    // Longest-processing-time first within groups of heads (as v5): every head's heaviest query
    // block, then the next heaviest, ... so the tail of the grid is short blocks.
    const int m_blocks = lab_cdiv(nq, BM);
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
  const int m0 = m_block * BM;
  const int n_end = CAUSAL ? min(nk, min(nq, m0 + BM)) : nk;  // keys any row of this block sees
  const int n_tiles = lab_cdiv(n_end, BN);

  // The 128-byte swizzle repeats every 1024 bytes: tiles start on a 1024-byte boundary.
  const uint32_t s_base = (lab_smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_q = s_base;
  auto s_k = [&](int s) { return s_base + C::kKOffset + s * C::kKVBytes; };
  auto s_v = [&](int s) { return s_base + C::kVOffset + s * C::kKVBytes; };
  const uint32_t bar_q = lab_smem_addr(&bars[0]);
  auto k_full = [&](int s) { return lab_smem_addr(&bars[1 + s]); };
  auto k_empty = [&](int s) { return lab_smem_addr(&bars[1 + S + s]); };
  auto v_full = [&](int s) { return lab_smem_addr(&bars[1 + 2 * S + s]); };
  auto v_empty = [&](int s) { return lab_smem_addr(&bars[1 + 3 * S + s]); };
  constexpr int kConsumerThreads = 128 * C::kConsumers;

  if (tid == 0) {
    lab_mbar_init(bar_q, 1);
    for (int s = 0; s < S; ++s) {
      lab_mbar_init(k_full(s), 1);
      lab_mbar_init(v_full(s), 1);
      lab_mbar_init(k_empty(s), kConsumerThreads);
      lab_mbar_init(v_empty(s), kConsumerThreads);
    }
    lab_fence_mbar_init();
  }
  __syncthreads();

  const int warpgroup = tid / 128;
  if (warpgroup == 0) {
    // ---------------- producer: one thread issues every TMA copy ----------------
    lab_setmaxnreg_dec<C::kProducerRegs>();
    if (tid == 0) {
      lab_tma_prefetch_map(&tm_q);
      lab_tma_prefetch_map(&tm_k);
      lab_tma_prefetch_map(&tm_v);
      lab_mbar_arrive_expect_tx(bar_q, C::kQBytes);
#pragma unroll
      for (int h = 0; h < C::kHalves; ++h) lab_tma_load_3d(s_q + h * BM * 128, &tm_q, bar_q, h * 64, m0, bh_index);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % S;
        const uint32_t parity = ((j / S) & 1) ^ 1;  // first pass: the fresh slot counts as free
        lab_mbar_wait(k_empty(s), parity);
        lab_mbar_arrive_expect_tx(k_full(s), C::kKVBytes);
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h)
          lab_tma_load_3d(s_k(s) + h * BN * 128, &tm_k, k_full(s), h * 64, j * BN, bh_index);
        lab_mbar_wait(v_empty(s), parity);
        lab_mbar_arrive_expect_tx(v_full(s), C::kKVBytes);
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h)
          lab_tma_load_3d(s_v(s) + h * BN * 128, &tm_v, v_full(s), h * 64, j * BN, bh_index);
      }
    }
    return;
  }

  // ---------------- consumers: S = Q K^T, online softmax, O += P V ----------------
  lab_setmaxnreg_inc<C::kConsumerRegs>();
  const int cw = warpgroup - 1;          // consumer warpgroup: query rows m0 + 64 cw ..
  const int ctid = tid - 128;            // 0 .. kConsumerThreads-1
  const int lane = tid & 31, warp_in_wg = (tid / 32) & 3;
  const int wg_row0 = m0 + cw * 64;
  const int row_g = wg_row0 + warp_in_wg * 16 + (lane >> 2);  // this thread's rows: row_g, row_g + 8
  (void)ctid;

  float o_acc[D / 2];   // m64nD accumulator: D/8 column blocks x 4
  float s_acc[BN / 2];  // m64nBN accumulator
  uint32_t p_frag[BN / 16][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o_acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) s_acc[i] = 0.f;

  // Descriptors. Q and K are K-major (D contiguous), in 64-column swizzle atoms of [rows x 128 B];
  // 8-row groups 1024 bytes apart (stride byte offset); a k16 step inside an atom is +32 bytes.
  // V is read MN-major (D contiguous, keys the reduction): 64-column atoms BN*128 bytes apart
  // (leading byte offset), 8-key groups 1024 apart, a k16 step (16 keys) is +2048 bytes.
  auto issue_s = [&](int stage) {
    lab_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t q_addr = s_q + (kk / 4) * BM * 128 + cw * 64 * 128 + (kk % 4) * 32;
      const uint32_t k_addr = s_k(stage) + (kk / 4) * BN * 128 + (kk % 4) * 32;
      wgmma_ss<T, BN>(s_acc, lab_wgmma_desc_sw128(q_addr, 16, 1024), lab_wgmma_desc_sw128(k_addr, 16, 1024),
                      kk > 0 ? 1 : 0);
    }
    lab_wgmma_commit();
  };
  auto issue_pv = [&](int stage) {
    lab_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      wgmma_rs_tb<T, D>(o_acc, p_frag[kk], lab_wgmma_desc_sw128(s_v(stage) + kk * 2048, BN * 128, 1024));
    lab_wgmma_commit();
  };

  // Softmax of the S tile j in s_acc (scores -> probabilities, fp32, in place); returns the factor
  // alpha by which O and the running sums shrink (the running max moved from m_old to m_new).
  auto softmax = [&](int j, float (&alpha)[2]) {
    const int n0 = j * BN;
    // Mask only the ragged last tile and, causal, tiles crossing this warpgroup's diagonal.
    if (n0 + BN > nk || (CAUSAL && n0 + BN - 1 > wg_row0)) {
      const int col0 = n0 + (lane & 3) * 2;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = col0 + i * 8 + (e & 1), row = row_g + (e >> 1) * 8;
          if (col >= nk || (CAUSAL && col > row)) s_acc[i * 4 + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
      float mx = fmaxf(s_acc[2 * h], s_acc[2 * h + 1]);
#pragma unroll
      for (int i = 1; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s_acc[i * 4 + 2 * h], s_acc[i * 4 + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Every row sees key 0 in tile 0 and at least one key of every later tile it reads (the
      // causal diagonal tile starts at or before the block's first row), so m_new is finite.
      const float m_new = fmaxf(row_max[h], mx * scale_log2);
      alpha[h] = lab_exp2(row_max[h] - m_new);  // first tile: 2^-inf = 0
      row_max[h] = m_new;
      float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) {
        const float p0 = lab_exp2(fmaf(s_acc[i * 4 + 2 * h], scale_log2, -m_new));
        const float p1 = lab_exp2(fmaf(s_acc[i * 4 + 2 * h + 1], scale_log2, -m_new));
        s_acc[i * 4 + 2 * h] = p0;
        s_acc[i * 4 + 2 * h + 1] = p1;
        sum0 += p0;
        sum1 += p1;
      }
      row_sum[h] = row_sum[h] * alpha[h] + (sum0 + sum1);
    }
  };
  // P (16-bit) as the A operand of P V: k-step kk covers key blocks 2kk and 2kk+1.
  auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      p_frag[kk][0] = lab_pack2<T>(s_acc[8 * kk + 0], s_acc[8 * kk + 1]);
      p_frag[kk][1] = lab_pack2<T>(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
      p_frag[kk][2] = lab_pack2<T>(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
      p_frag[kk][3] = lab_pack2<T>(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o_acc[i * 4 + 0] *= alpha[0];
      o_acc[i * 4 + 1] *= alpha[0];
      o_acc[i * 4 + 2] *= alpha[1];
      o_acc[i * 4 + 3] *= alpha[1];
    }
  };

  // Ping-pong: warpgroup cw issues its products after the other one has issued its own.
  constexpr int kBarIssue = 1;  // named barriers 1 + cw (0 is __syncthreads)
  auto turn_wait = [&]() {
    if constexpr (C::kPingPong) lab_named_sync(kBarIssue + cw, kConsumerThreads);
  };
  auto turn_pass = [&]() {
    if constexpr (C::kPingPong) lab_named_arrive(kBarIssue + (cw ^ 1), kConsumerThreads);
  };
  if constexpr (C::kPingPong) {
    if (cw == 1) lab_named_arrive(kBarIssue + 0, kConsumerThreads);  // warpgroup 0 goes first
  }

  lab_mbar_wait(bar_q, 0);
  // Tile 0: S_0, its softmax, P_0.
  lab_mbar_wait(k_full(0), 0);
  turn_wait();
  issue_s(0);
  turn_pass();
  lab_wgmma_wait<0>();
  lab_fence_regs(s_acc);
  lab_mbar_arrive(k_empty(0));
  {
    float alpha[2];
    softmax(0, alpha);  // O is zero: nothing to rescale
    pack_p();
  }

  // Steady state, iteration j: S_j = Q K_j^T and O += P_{j-1} V_{j-1} are both issued, then the
  // softmax of S_j runs while P_{j-1} V_{j-1} is still on the tensor cores; O is rescaled and P_j
  // packed only after that product has finished reading P's registers and writing O's.
  for (int j = 1; j < n_tiles; ++j) {
    const int sk = j % S, sv = (j - 1) % S;
    lab_mbar_wait(k_full(sk), (j / S) & 1);
    lab_mbar_wait(v_full(sv), ((j - 1) / S) & 1);
    turn_wait();
    issue_s(sk);
    issue_pv(sv);
    turn_pass();
    lab_wgmma_wait<1>();  // S_j done (groups complete in order); P V may still run
    lab_fence_regs(s_acc);
    lab_mbar_arrive(k_empty(sk));
    float alpha[2];
    softmax(j, alpha);
    lab_wgmma_wait<0>();
    lab_fence_regs(o_acc);
    lab_fence_regs(p_frag);
    lab_mbar_arrive(v_empty(sv));
    rescale_o(alpha);
    pack_p();
  }
  {
    const int sv = (n_tiles - 1) % S;
    lab_mbar_wait(v_full(sv), ((n_tiles - 1) / S) & 1);
    turn_wait();
    issue_pv(sv);
    turn_pass();
    lab_wgmma_wait<0>();
    lab_fence_regs(o_acc);
    lab_fence_regs(p_frag);
  }
  if constexpr (C::kPingPong) {
    // Balance the turn barrier: the last pass went to the other warpgroup, which will not wait
    // for it again; warpgroup 1 consumes warpgroup 0's last pass, warpgroup 0 got one extra at start.
    if (cw == 0) lab_named_sync(kBarIssue + 0, kConsumerThreads);
  }

  // Epilogue: O / l, straight from the accumulator to global memory (a quad writes 16 contiguous
  // bytes of a row; rows past nq are not written).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = 1.f / l;
    const int row = row_g + h * 8;
    if (row < nq) {
      T* dst = o + ((size_t)bh_index * nq + row) * D + (lane & 3) * 2;
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        *reinterpret_cast<uint32_t*>(dst + i * 8) = lab_pack2<T>(o_acc[i * 4 + 2 * h] * inv, o_acc[i * 4 + 2 * h + 1] * inv);
    }
  }
#else
  // Built for another target: the launcher refuses before launching (wgmma/TMA need sm_90a).
  __trap();
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side: tensor maps (TMA descriptors) and the launch.
// ---------------------------------------------------------------------------------------------

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no -lcuda needed).
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A [bh, n, d] tensor as a 3-D map read in boxes of [rows, 64 columns] with the 128-byte swizzle
// wgmma's descriptors expect. The middle dimension is n itself, so a box running past a head's
// last row is zero-filled instead of reading the next head.
template <typename T>
static bool make_map(CUtensorMap* map, const void* ptr, int d, int n, int bh, int box_rows) {
  const CUtensorMapDataType type =
      std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t dims[3] = {(cuuint64_t)d, (cuuint64_t)n, (cuuint64_t)bh};
  const cuuint64_t strides[2] = {(cuuint64_t)d * 2, (cuuint64_t)n * d * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return encode_tiled()(map, type, 3, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <class C, typename T, bool CAUSAL>
const char* launch_one(const LabAttentionArgs* a, cudaStream_t stream) {
  auto kernel = fwd_kernel<C, T, CAUSAL>;
  static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  const int bh = a->batch * a->heads;
  CUtensorMap tm_q, tm_k, tm_v;
  if (!make_map<T>(&tm_q, a->q, C::D, a->seqlen_q, bh, C::BM) || !make_map<T>(&tm_k, a->k, C::D, a->seqlen_k, bh, C::BN) ||
      !make_map<T>(&tm_v, a->v, C::D, a->seqlen_k, bh, C::BN))
    return "v6: cuTensorMapEncodeTiled refused a tensor map (q, k, v must be contiguous and 16-byte aligned)";
  const int m_blocks = lab_cdiv(a->seqlen_q, C::BM);
  dim3 grid(m_blocks, bh);
  if (CAUSAL) {
    if ((long long)m_blocks * bh > 0x7fffffffLL) return "v6: too many query blocks for one launch";
    grid = dim3(m_blocks * bh);
  } else if (bh > 65535) {
    return "v6: batch*heads must be <= 65535 (grid y limit)";
  }
  const float scale_log2 = a->softmax_scale * 1.4426950408889634f;  // exp(x) = 2^(x log2 e)
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, static_cast<T*>(a->o), a->seqlen_q,
                                                       a->seqlen_k, bh, scale_log2);
  return lab_last_launch_error();
}

template <class C, bool CAUSAL>
const char* launch(const LabAttentionArgs* a, cudaStream_t stream) {
  switch (a->dtype) {
    case LAB_FLOAT16: return launch_one<C, __half, CAUSAL>(a, stream);
    case LAB_BFLOAT16: return launch_one<C, __nv_bfloat16, CAUSAL>(a, stream);
    default: return "v6 supports float16 and bfloat16 only (wgmma rung); use --dtype float16";
  }
}

// The configurations the launcher uses (picked by measurement, benchmarks/v6_notes.md run 5):
//                       D   BN  stages ping-pong consumer warpgroups
using Default64 = Config<64, 128, 2, false, 1>;     // BM = 64, two CTAs per SM
using Long64 = Config<64, 128, 2, false, 3>;        // BM = 192: non-causal, seqlen_k >= kLongKeys
using Default128 = Config<128, 128, 2, false, 2>;   // BM = 128, one CTA per SM
// At D=64 with many key tiles per CTA, three consumer warpgroups share each K/V tile (a third of
// the L2 -> shared traffic per query row); with few, two small CTAs per SM hide each other's
// prologue and epilogue.
constexpr int kLongKeys = 8192;

#ifdef LAB_TUNING
// Candidate configurations for `lab tune --variant v6` (the tuning contract of common.cuh), fp16 and
// bf16; the launcher's own choice is timed beside them as "default". Label: C consumer warpgroups
// (BM = 64 C query rows), BN keys per tile, S stages of the K/V ring, pp = ping-pong.
template <class C>
const char* launch_any(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? launch<C, true>(a, stream) : launch<C, false>(a, stream);
}
template <class C>
const char* launch_non_causal(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? "candidate is for non-causal problems only" : launch<C, false>(a, stream);
}
static const LabTuneCandidate kCandidates64[] = {
    {"C1 BN128 S2 (2 CTAs/SM)", launch_any<Config<64, 128, 2, false, 1>>},
    {"C1 BN128 S3 (2 CTAs/SM)", launch_any<Config<64, 128, 3, false, 1>>},
    {"C1 BN64 S2 (2 CTAs/SM)", launch_any<Config<64, 64, 2, false, 1>>},
    {"C2 BN128 S2", launch_any<Config<64, 128, 2, false, 2>>},
    {"C2 BN128 S2 pp", launch_any<Config<64, 128, 2, true, 2>>},
    {"C3 BN128 S2 (non-causal)", launch_non_causal<Config<64, 128, 2, false, 3>>},
};
static const LabTuneCandidate kCandidates128[] = {
    {"C2 BN128 S2", launch_any<Config<128, 128, 2, false, 2>>},
    {"C2 BN128 S2 pp", launch_any<Config<128, 128, 2, true, 2>>},
    {"C2 BN64 S3", launch_any<Config<128, 64, 3, false, 2>>},
    {"C1 BN64 S2 (2 CTAs/SM)", launch_any<Config<128, 64, 2, false, 1>>},
};
static LabTuneList candidates(int head_dim) {
  switch (head_dim) {
    case 64: return lab_tune_list(kCandidates64);
    case 128: return lab_tune_list(kCandidates128);
    default: return {nullptr, 0};
  }
}
#endif

// Hopper only: wgmma, TMA and setmaxnreg exist on compute capability 9.0 (sm_90a) and nowhere else.
static const char* device_refusal() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "v6: no CUDA device";
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0)
    return "v6 needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma + TMA); this GPU is not one";
  return nullptr;
}

}  // namespace v6

static const char* refuse(const LabAttentionArgs* args) {
  if (args->head_dim != 64 && args->head_dim != 128) return "v6 supports head_dim 64 and 128";
  if (args->seqlen_q < 1 || args->seqlen_k < 1) return "v6 needs seqlen_q >= 1 and seqlen_k >= 1";
  // The row max is taken on raw scores and scaled afterwards, which needs a positive scale.
  if (!(args->softmax_scale > 0.f)) return "v6 needs softmax_scale > 0";
  const void* ptrs[4] = {args->q, args->k, args->v, args->o};
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "v6 needs q, k, v and o 16-byte aligned (TMA)";
  if (const char* refusal = v6::device_refusal()) return refusal;
  if (!v6::encode_tiled()) return "v6: the driver has no cuTensorMapEncodeTiled (needs CUDA 12+ driver)";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v6(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args)) return why;
  if (args->head_dim == 64) {
    if (args->causal) return v6::launch<v6::Default64, true>(args, stream);
    return args->seqlen_k >= v6::kLongKeys ? v6::launch<v6::Long64, false>(args, stream)
                                           : v6::launch<v6::Default64, false>(args, stream);
  }
  return args->causal ? v6::launch<v6::Default128, true>(args, stream) : v6::launch<v6::Default128, false>(args, stream);
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v6_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(v6::candidates(head_dim));
}
LAB_EXPORT const char* lab_forward_v6_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args)) return why;
  return lab_tune_launch(v6::candidates(args->head_dim), args, stream, config);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v6"
// slug = "wgmma"
// title = "Hopper: wgmma + TMA, a producer warpgroup feeding consumer warpgroups (sm_90a)"
// dtypes = ["float16", "bfloat16"]
// head_dims = [64, 128]
// min_cc = "9.0"             # wgmma, TMA, setmaxnreg: Hopper only
// arch_flags = ["-gencode=arch=compute_90a,code=sm_90a"]
// attacks = ["compute-bound"]  # v5's tensor path: mma.sync issue and its ldmatrix -> HMMA -> softmax chain
// grid = "q-tiles,bh"        # non-causal: batch*heads on grid.y (<= 65535, refused above)
// aligned16 = true           # TMA: the launcher refuses q, k, v, o not 16-byte aligned
// lab:end
