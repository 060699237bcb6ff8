// v4_double_buffer: v3 plus cp.async K/V loads that run under the compute: FlashAttention-2's
// interleaved K/V schedule on v3's own D=64 tile and buffers (two stages at D=32, mbarriers at D=128).
//
// What changed: K and V tiles are copied global -> shared with cp.async.cg (16 bytes per thread per
//   instruction, through neither registers nor L1) instead of v3's LDG + STS pairs between two
//   barriers, and each copy is issued a matrix product before its data is needed. Rows past
//   seqlen_k are zero-filled by the copy itself (src-size 0), as v3's loads wrote zeros; full tiles
//   use the form without the size operand. The Q tile keeps v3's synchronous float4 copy (it is
//   scaled on the way in, which cp.async cannot do), issued after the first K copy so they overlap.
//   Thread layout, padded layouts and compute are v3's; three K/V schedules (V4Config's kSchedule),
//   each the default where it measured fastest:
//   - 1, interleaved (FlashAttention-2's load order), the D=64 default: v3's tile (128 x 64, TM8 TN8,
//     d and key loops unrolled by 2 instead of v3's 1 and 2), single sK and sV and v3's 103 KB, so
//     the same 2 CTAs per SM. K(0) is issued before the loop; in iteration j: wait for K(j),
//     barrier, issue V(j) into sV, compute S = Q K(j)^T and the softmax; wait for V(j), barrier
//     (every warp is done reading sK), issue K(j+1) into sK, compute O += P V(j); the next
//     iteration's first barrier comes before V(j+1) overwrites sV. Two barriers per tile, as in v3.
//   - 2, two stages of sK and sV, the D=32 default: while tile j is computed, tile j+1 fills the
//     other stage (cp.async.wait_group 1 waits only for tile j); one barrier at each end of a tile.
//     At D=64 v3's tile twice needs 136 KB (1 CTA/SM, 13% slower); the tiles that fit measured
//     0.97-0.98x v3.
//   - 3, split-phase, the D=128 default: schedule 1's buffers and copy order, but no CTA barrier in
//     the loop: "K(j)/V(j) landed" are mbarriers each thread's copies arrive on when they complete
//     (cp.async.mbarrier.arrive.noinc), "sK/sV free" are mbarriers each thread arrives on when done
//     reading, and V(j) / K(j+1) go out half-way through S(j) / P V(j), so a warp waits for the data
//     and for stragglers a quarter of a tile behind, not for the slowest warp at a barrier.
// Bottleneck attacked (v3's profile, profiles/examples/*-v3-B8-H16-N1024-D64-float32, H200): v3 is
//   issue-bound (73% of issue slots, FMA pipe 64%), and every K/V tile is loaded global -> register
//   -> shared between two barriers, so a CTA's warps stall on the load (long scoreboard: 1.7-1.9% of
//   stall samples) and the barrier (1.5-1.7%) once per tile while only the other CTA on the SM
//   issues; the copies also take issue slots (16 LDG + 16 STS per thread per tile and the zero-fill
//   selects). Here no warp waits on a load it did not hide under a matrix product, and the copies
//   issue 16 LDGSTS per tile per thread with no register staging.
// Predicted gain: two-stage design (written before its first timing): 1.1-1.3x over v3 at
//   B=8,H=16,N=1024,D=64. Interleaved schedule (run 6, before its first timing): 1.01-1.03x there,
//   at most v3's 1.9% long-scoreboard stalls and the ~0.5% of instructions the LDG/STS pairs cost.
//   Split-phase (run 7): 1.00-1.015x.
// Measured (NVIDIA H200, 2026-11-21; benchmarks/fp32_notes.md runs 5-8; `lab bench`, median of 30,
//   L2 flushed, run 8): B=8,H=16,N=1024,D=64: v4 0.847 ms (40.6 TFLOP/s) vs v3 0.842: 0.99x -- v4 is
//   NOT faster than v3 on the default shape, and every prediction above missed. Same run: causal
//   1.01x, N=2048 1.00x (3.319 vs 3.309 ms; 1.18x SDPA efficient fp32), N=2048 causal 1.01x, D=32
//   1.02x, D=128 1.06x (7.356 vs 7.827 ms). fp32_dev (30 reps, round-robin, each default timed
//   twice: same-kernel spread <= 0.2%): D=64 interleaved u2,2 0.996-1.004x v3 on the four D=64
//   shapes; with v3's exact unroll (u1,2) 0.98-0.99x; split-phase at D=64 0.99-1.00x; run 5's
//   two-stage 128 x 32 tile 0.98x. So v4 is at parity with v3 at D=64, ahead at D=32/128 (where
//   v3's tiles leave room for the schedules at no cost). Why parity, from ncu (lab profile, both
//   defaults, B8 H16 N1024 D64): the schedule does what it should -- long-scoreboard samples
//   1,802 -> 1,100, global loads 1.11M -> 0.07M instructions (LDGSTS: 1.05M), shared stores -20%,
//   wait and short-scoreboard samples down -- but the kernel is issue-bound: issued instructions
//   fall only 0.2% (638.6M -> 637.4M), and the freed cycles go to dispatch (12.9k -> 13.9k),
//   mio-throttle (0.4k -> 1.1k) and math-pipe-throttle (0.6k -> 1.2k) stalls; issue active stays
//   at 72-73%, FMA pipe at 64%. Hiding 2% of stalls cannot speed up a kernel whose warps, when one
//   stalls, have another ready to issue; the unroll factors move it more (1-2%) than any K/V schedule.
//   Next: the FFMA pipe and the issue slots are the wall (lab analyze: compute-bound) -> v5.
// Profile: lab profile --variant v4
//
// Layout: Q, K, V, O are (B, H, N, D) contiguous fp32 with 16-byte aligned base pointers (the
// launcher refuses others). D is a multiple of 4, so every row starts on a 16-byte boundary.
// Causal masking is top-left aligned: query i attends keys j <= i, also when seqlen_q !=
// seqlen_k (as torch's scaled_dot_product_attention).
#include <math.h>

#include "common.cuh"

// One tile configuration. The CTA is kThreadsY x kThreadsX threads; thread (ty, tx) = (tid / 8,
// tid % 8), so warp w holds ty = 4w..4w+3 and every query row of the tile belongs to one warp:
// row reductions are shuffles among the 8 lanes of a row, and the P a warp writes it reads back.
template <int D_, int TM_, int TN_, int THREADS_, int MIN_BLOCKS_, int D_UNROLL_ = 1, int N_UNROLL_ = 1,
          int P_CHUNK_ = 0, int KV_SCHEDULE_ = 1>
struct V4Config {
  static constexpr int D = D_;
  static constexpr int TM = TM_;              // query rows per thread (strided by kThreadsY)
  static constexpr int TN = TN_;              // keys per thread in S (strided by kThreadsX)
  static constexpr int kThreads = THREADS_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;  // __launch_bounds__ hint: CTAs per SM
  static constexpr int kUnrollD = D_UNROLL_;  // unroll factor of the loop over d in S = Q K^T (each
                                              // step, 4 d x TM x TN FFMAs, is always fully unrolled)
  static constexpr int kUnrollN = N_UNROLL_;  // unroll factor of the loop over keys in O += P V
  static constexpr int kThreadsX = 8;
  static constexpr int kThreadsY = kThreads / kThreadsX;
  static constexpr int BM = TM * kThreadsY;   // query rows per CTA
  static constexpr int BN = TN * kThreadsX;   // keys per K/V tile
  static constexpr int kGroups = D / 32;      // float4 column groups of O per thread
  static constexpr int QP = D + 4;            // sQ pitch (floats): consecutive rows 4 banks apart
  static constexpr int KP = D + 4;            // sK pitch: the same for the 8 rows of one j
  static constexpr int VP = D;                // sV pitch: lanes read 8 consecutive float4 of one row
  static constexpr int kPChunk = P_CHUNK_ ? P_CHUNK_ : BN;  // keys of P staged in shared memory at a time
  static constexpr int PP = kPChunk + 8;      // sP pitch: row step 8 (or 24) banks, so the scalar stores of
                                              // a warp (4 rows x 8 columns) hit 32 distinct banks
  // How the K/V copies overlap the compute (v4::kInterleaved, kTwoStage, kSplitPhase; the header
  // describes each). Only the two-stage schedule has a second sK and sV.
  static constexpr int kSchedule = KV_SCHEDULE_;
  static constexpr int kStages = kSchedule == 2 ? 2 : 1;
  static constexpr bool kSplit = kSchedule == 3;
  static constexpr int kHalves = kSplit ? 2 : 1;  // the split schedule issues its copies mid-product
  static constexpr size_t kSmemFloats =
      (size_t)BM * QP + kStages * ((size_t)BN * KP + (size_t)BN * VP) + (size_t)BM * PP;
  static constexpr int kBarriers = kSplit ? 4 : 0;  // mbarriers after sP: K full, V full, K free, V free
  static constexpr size_t kSmemBytes = kSmemFloats * sizeof(float) + kBarriers * sizeof(uint64_t);
  static_assert(kThreads % 32 == 0 && kThreadsY % 4 == 0, "whole warps of 4 row groups");
  static_assert(D % 32 == 0, "D must be 32, 64 or 128");
  static_assert(QP % 4 == 0 && KP % 4 == 0 && VP % 4 == 0 && PP % 4 == 0, "16-byte aligned rows");
  static_assert(kPChunk % 16 == 0 && BN % kPChunk == 0, "P chunks of 16, 32 or 64 keys that tile BN");
  static_assert(kSchedule >= 1 && kSchedule <= 3, "K/V schedule: 1 interleaved, 2 two-stage, 3 split-phase");
  static_assert(!kSplit || (kPChunk == BN && D % 8 == 0 && BN % 8 == 0), "split-phase: whole-tile P, halves of 4-steps");
};

namespace v4 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
// K/V schedules (V4Config's kSchedule).
constexpr int kInterleaved = 1;  // FlashAttention-2: one sK, one sV, two CTA barriers per tile
constexpr int kTwoStage = 2;     // two sK and two sV, one barrier at each end of a tile
constexpr int kSplitPhase = 3;   // kInterleaved's buffers and copy order, synchronized by mbarriers
// The split-phase schedule's mbarriers: K(j)/V(j) landed (one asynchronous arrival per thread, when
// its copies complete), and sK/sV free (one arrival per thread, when it is done reading the tile).
enum Barrier : int { kKFull = 0, kVFull = 1, kKFree = 2, kVFree = 3 };

// mbarrier wrappers (sm_80+). The "memory" clobbers keep the compiler from moving shared loads of a
// tile across the wait that makes it visible or the arrival that frees it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(lab_smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared.b64 state, [%0];\n}\n" ::"r"(lab_smem_addr(bar))
               : "memory");
}
// Arrive on `bar` once this thread's earlier cp.async copies have landed (.noinc: the arrival is one
// of the count the barrier was initialized with).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(lab_smem_addr(bar)) : "memory");
}
// Wait until the phase with this parity has completed (phase j of every barrier here has parity j & 1;
// no barrier can run two phases ahead of a thread that still waits on it).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
  uint32_t done;
  do {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(lab_smem_addr(bar)), "r"(parity) : "memory");
#else
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(lab_smem_addr(bar)), "r"(parity) : "memory");
#endif
  } while (!done);
}

__device__ __forceinline__ float component(const float4& v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;  // e is a compile-time constant after unrolling
}

// Copy a tile of ROWS rows of D floats (contiguous in global memory, `valid` of them in range) into
// shared memory with row pitch PITCH, as 16-byte chunks: chunk c goes to thread c % THREADS, so
// consecutive lanes read consecutive 16 bytes (v2's coalescing). Rows >= valid are written as
// zeros: masked scores then meet zero V rows (0 * garbage could be NaN) and zero Q rows.
template <int ROWS, int D, int PITCH, int THREADS>
__device__ __forceinline__ void load_tile(float* __restrict__ dst, const float* __restrict__ src, int valid,
                                          int tid, float scale) {
  constexpr int kChunksPerRow = D / 4;
  constexpr int kChunks = ROWS * kChunksPerRow;
  static_assert(kChunks % THREADS == 0, "every thread copies the same number of chunks");
  const float4* src4 = reinterpret_cast<const float4*>(src);
#pragma unroll
  for (int it = 0; it < kChunks / THREADS; ++it) {
    const int c = it * THREADS + tid;
    const int row = c / kChunksPerRow, col4 = c % kChunksPerRow;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < valid) {
      val = src4[c];
      val.x *= scale; val.y *= scale; val.z *= scale; val.w *= scale;
    }
    *reinterpret_cast<float4*>(dst + row * PITCH + col4 * 4) = val;
  }
}

// The same tile (ROWS rows of D floats, `valid` in range) copied with cp.async: 16 bytes per thread
// per instruction, straight into shared memory. Rows >= valid are zero-filled by the copy (src-size
// 0 reads nothing; the source address stays the tile's first row, which is always in range). Full
// tiles (all but a ragged last one; `valid` is uniform, so the branch is too) take the form without
// the size operand: no per-chunk compare and select, which count in a kernel bound by issue slots.
template <int ROWS, int D, int PITCH, int THREADS>
__device__ __forceinline__ void load_tile_async(float* __restrict__ dst, const float* __restrict__ src, int valid,
                                                int tid) {
  constexpr int kChunksPerRow = D / 4;
  constexpr int kChunks = ROWS * kChunksPerRow;
  static_assert(kChunks % THREADS == 0, "every thread copies the same number of chunks");
  if (valid >= ROWS) {
#pragma unroll
    for (int it = 0; it < kChunks / THREADS; ++it) {
      const int c = it * THREADS + tid;
      const int row = c / kChunksPerRow, col4 = c % kChunksPerRow;
      lab_cp_async_16(lab_smem_addr(dst + row * PITCH + col4 * 4), src + 4 * c);
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < kChunks / THREADS; ++it) {
    const int c = it * THREADS + tid;
    const int row = c / kChunksPerRow, col4 = c % kChunksPerRow;
    const bool in_range = row < valid;
    lab_cp_async_16(lab_smem_addr(dst + row * PITCH + col4 * 4), in_range ? src + 4 * c : src, in_range ? 16 : 0);
  }
}

}  // namespace v4

// At global scope (not in a namespace) so that Nsight and ptxas show a short name.
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
attention_fwd_v4_kernel(const float* __restrict__ q,  // [B, H, seqlen_q, D]
                        const float* __restrict__ k,  // [B, H, seqlen_k, D]
                        const float* __restrict__ v,  // [B, H, seqlen_k, D]
                        float* __restrict__ o,        // [B, H, seqlen_q, D]
                        int seqlen_q, int seqlen_k, int causal, float softmax_scale) {
  constexpr int D = C::D, TM = C::TM, TN = C::TN, BM = C::BM, BN = C::BN, G = C::kGroups;
  constexpr int TY = C::kThreadsY;
  extern __shared__ __align__(16) float smem[];
  float* sQ = smem;                          // [BM][QP]  this CTA's query rows, scaled by softmax_scale*log2(e)
  float* sK_stages = sQ + BM * C::QP;        // [kStages][BN][KP]  key tile j (and j + 1)
  float* sV_stages = sK_stages + C::kStages * BN * C::KP;  // [kStages][BN][VP]  value tile j (and j + 1)
  float* sP = sV_stages + C::kStages * BN * C::VP;         // [BM][PP]  probabilities of tile j (each warp its rows)
  uint64_t* bars = reinterpret_cast<uint64_t*>(sP + BM * C::PP);  // [kBarriers]  split-phase only

  const int tid = threadIdx.x;
  const int tx = tid % C::kThreadsX;
  const int ty = tid / C::kThreadsX;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BM;  // heaviest causal query tiles start first
  const size_t bh = blockIdx.y;
  // size_t offsets: B*H*N*D can pass 2^31 elements.
  const float* q_bh = q + bh * (size_t)seqlen_q * D;
  const float* k_bh = k + bh * (size_t)seqlen_k * D;
  const float* v_bh = v + bh * (size_t)seqlen_k * D;
  float* o_bh = o + bh * (size_t)seqlen_q * D;

  // Under causal masking no key past the tile's last query row is visible, so stop there.
  const int kv_end = causal ? min(seqlen_k, q0 + BM) : seqlen_k;
  const int num_kv_tiles = lab_cdiv(kv_end, BN);
  if constexpr (C::kSplit) {
    if (tid == 0) {
#pragma unroll
      for (int b = 0; b < C::kBarriers; ++b) v4::mbarrier_init(&bars[b], C::kThreads);
    }
    __syncthreads();  // the barriers are initialized before anyone arrives on them
  }
  // Tile 0's copies go out first, so that they overlap the synchronous Q load below (interleaved:
  // K(0) only; V(0) goes out at the top of the first iteration, like every V; split-phase: both).
  v4::load_tile_async<BN, D, C::KP, C::kThreads>(sK_stages, k_bh, seqlen_k, tid);
  if constexpr (C::kSplit) {
    v4::cp_async_mbarrier_arrive(&bars[v4::kKFull]);
    v4::load_tile_async<BN, D, C::VP, C::kThreads>(sV_stages, v_bh, seqlen_k, tid);
    v4::cp_async_mbarrier_arrive(&bars[v4::kVFull]);
  } else {
    if constexpr (C::kStages == 2) v4::load_tile_async<BN, D, C::VP, C::kThreads>(sV_stages, v_bh, seqlen_k, tid);
    lab_cp_async_commit();
  }
  // The barrier at the top of the K/V loop (split-phase: the one below) orders these writes before
  // any read of sQ.
  v4::load_tile<BM, D, C::QP, C::kThreads>(sQ, q_bh + (size_t)q0 * D, seqlen_q - q0, tid,
                                           softmax_scale * v4::kLog2e);
  if constexpr (C::kSplit) __syncthreads();

  float acc_o[TM][4 * G];   // O rows ty + TY*i, columns 32*g + 4*tx + e at [i][4*g + e]
  float row_max[TM];        // running max of the (log2-scaled) scores of each row
  float row_sum[TM];        // this thread's share of the running sum of exp2(score - max)
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.f;
#pragma unroll
    for (int c = 0; c < 4 * G; ++c) acc_o[i][c] = 0.f;
  }

  for (int tile = 0; tile < num_kv_tiles; ++tile) {
    const int k0 = tile * BN;
    float* sK = sK_stages + (C::kStages == 2 ? (tile % 2) * BN * C::KP : 0);
    float* sV = sV_stages + (C::kStages == 2 ? (tile % 2) * BN * C::VP : 0);
    if constexpr (C::kSplit) {
      v4::mbarrier_wait(&bars[v4::kKFull], tile & 1);  // everyone's copies of K(tile) have landed
    } else if constexpr (C::kStages == 1) {
      // Interleaved (FlashAttention-2): one cp.async group is in flight at a time, K(tile) here.
      lab_cp_async_wait<0>();  // this thread's copies of K(tile) have landed
      __syncthreads();  // everyone's K(tile) (and, on the first, sQ) is visible, and every warp is done
                        // reading V(tile - 1) and its P rows, so sV may be refilled
      v4::load_tile_async<BN, D, C::VP, C::kThreads>(sV, v_bh + (size_t)k0 * D, seqlen_k - k0, tid);
      lab_cp_async_commit();  // V(tile) flies while S = Q K(tile)^T and the softmax run
    } else if (tile + 1 < num_kv_tiles) {
      // Prefetch tile + 1 into the other stage: the barrier at the end of the previous iteration
      // guarantees every warp is done reading it.
      const int next_k0 = k0 + BN;
      v4::load_tile_async<BN, D, C::KP, C::kThreads>(sK_stages + ((tile + 1) % 2) * BN * C::KP,
                                                    k_bh + (size_t)next_k0 * D, seqlen_k - next_k0, tid);
      v4::load_tile_async<BN, D, C::VP, C::kThreads>(sV_stages + ((tile + 1) % 2) * BN * C::VP,
                                                    v_bh + (size_t)next_k0 * D, seqlen_k - next_k0, tid);
      lab_cp_async_commit();
      lab_cp_async_wait<1>();  // this thread's copies of `tile` have landed; tile + 1 may still fly
      __syncthreads();  // every thread's copies of `tile` (and, on the first, sQ) are visible
    } else {
      lab_cp_async_wait<0>();
      __syncthreads();
    }

    // S = Q K^T for this thread's TM x TN scores, four d at a time from 16-byte shared loads.
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.f;
#pragma unroll
    for (int half = 0; half < C::kHalves; ++half) {
#pragma unroll C::kUnrollD
      for (int d = half * (D / C::kHalves); d < (half + 1) * (D / C::kHalves); d += 4) {
        float4 kf[TN];
#pragma unroll
        for (int j = 0; j < TN; ++j) kf[j] = *reinterpret_cast<const float4*>(sK + (tx + 8 * j) * C::KP + d);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const float4 qf = *reinterpret_cast<const float4*>(sQ + (ty + TY * i) * C::QP + d);
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            s[i][j] = fmaf(qf.x, kf[j].x, s[i][j]);
            s[i][j] = fmaf(qf.y, kf[j].y, s[i][j]);
            s[i][j] = fmaf(qf.z, kf[j].z, s[i][j]);
            s[i][j] = fmaf(qf.w, kf[j].w, s[i][j]);
          }
        }
      }
      if constexpr (C::kSplit) {
        // Split-phase: V(tile) goes out half-way through S, once every thread is done reading
        // V(tile - 1); the wait comes a quarter of a tile after this thread's own arrival, so a
        // warp waits only for a straggler that is that far behind, not for the slowest at a barrier.
        if (half == 0 && tile > 0) {
          v4::mbarrier_wait(&bars[v4::kVFree], (tile - 1) & 1);
          v4::load_tile_async<BN, D, C::VP, C::kThreads>(sV, v_bh + (size_t)k0 * D, seqlen_k - k0, tid);
          v4::cp_async_mbarrier_arrive(&bars[v4::kVFull]);
        }
      }
    }
    if constexpr (C::kSplit) v4::mbarrier_arrive(&bars[v4::kKFree]);  // this thread is done reading sK

    // Mask keys past seqlen_k (ragged last tile) and, causal, keys after the row; only tiles that
    // reach past the end or past the tile's first query row need it.
    if (k0 + BN > seqlen_k || (causal && k0 + BN - 1 > q0)) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int row = q0 + ty + TY * i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int key = k0 + tx + 8 * j;
          if (key >= seqlen_k || (causal && key > row)) s[i][j] = -INFINITY;
        }
      }
    }

    // Online softmax. Key 0 is visible to every row and sits in the first tile, so after it every
    // row max is finite and exp2(-inf - max) = 0 for masked scores; on the first tile the old max
    // is -inf and the rescale exp2(-inf) = 0 multiplies zeros.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float tile_max = s[i][0];
#pragma unroll
      for (int j = 1; j < TN; ++j) tile_max = fmaxf(tile_max, s[i][j]);
#pragma unroll
      for (int lane_bit = 1; lane_bit < C::kThreadsX; lane_bit *= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(v4::kFullMask, tile_max, lane_bit));
      const float new_max = fmaxf(row_max[i], tile_max);
      const float rescale = exp2f(row_max[i] - new_max);
      row_max[i] = new_max;
      float tile_sum = 0.f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        s[i][j] = exp2f(s[i][j] - new_max);  // the score becomes its probability, in place
        tile_sum += s[i][j];
      }
      row_sum[i] = row_sum[i] * rescale + tile_sum;
#pragma unroll
      for (int c = 0; c < 4 * G; ++c) acc_o[i][c] *= rescale;
    }
    if constexpr (C::kSplit) {
      __syncwarp();  // this warp's lanes are done reading P(tile - 1) before P(tile) overwrites it
    } else if constexpr (C::kStages == 1) {
      lab_cp_async_wait<0>();  // this thread's copies of V(tile) have landed
      __syncthreads();  // everyone's V(tile) is visible, and every warp is done reading K(tile)
      if (tile + 1 < num_kv_tiles) {
        const int next_k0 = k0 + BN;
        v4::load_tile_async<BN, D, C::KP, C::kThreads>(sK, k_bh + (size_t)next_k0 * D, seqlen_k - next_k0, tid);
        lab_cp_async_commit();  // K(tile + 1) flies while O += P V(tile) runs
      }
    }
    // O += P V. P goes through shared memory (each warp its own rows: a row's probabilities are
    // spread over its 8 lanes, and every lane needs all of them), kPChunk keys at a time.
#pragma unroll
    for (int c0 = 0; c0 < BN; c0 += C::kPChunk) {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = c0 / 8; j < (c0 + C::kPChunk) / 8; ++j)
          sP[(ty + TY * i) * C::PP + tx + 8 * j - c0] = s[i][j];
      __syncwarp();  // this warp's P rows are written before its lanes read each other's
      if constexpr (C::kSplit) v4::mbarrier_wait(&bars[v4::kVFull], tile & 1);  // everyone's V(tile) landed

      // Four keys per step: one 16-byte load of P per row and of V per column group.
#pragma unroll
      for (int half = 0; half < C::kHalves; ++half) {
#pragma unroll C::kUnrollN
        for (int n = half * (C::kPChunk / C::kHalves); n < (half + 1) * (C::kPChunk / C::kHalves); n += 4) {
          float4 pf[TM];
#pragma unroll
          for (int i = 0; i < TM; ++i) pf[i] = *reinterpret_cast<const float4*>(sP + (ty + TY * i) * C::PP + n);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float4 vf[G];
#pragma unroll
            for (int g = 0; g < G; ++g)
              vf[g] = *reinterpret_cast<const float4*>(sV + (c0 + n + e) * C::VP + 32 * g + 4 * tx);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
              const float p = v4::component(pf[i], e);
#pragma unroll
              for (int g = 0; g < G; ++g) {
                acc_o[i][4 * g + 0] = fmaf(p, vf[g].x, acc_o[i][4 * g + 0]);
                acc_o[i][4 * g + 1] = fmaf(p, vf[g].y, acc_o[i][4 * g + 1]);
                acc_o[i][4 * g + 2] = fmaf(p, vf[g].z, acc_o[i][4 * g + 2]);
                acc_o[i][4 * g + 3] = fmaf(p, vf[g].w, acc_o[i][4 * g + 3]);
              }
            }
          }
        }
        if constexpr (C::kSplit) {
          // Split-phase: K(tile + 1) goes out half-way through P V, once every thread is done
          // reading K(tile) (arrived after its S, a softmax and half a P V ago).
          if (half == 0 && tile + 1 < num_kv_tiles) {
            const int next_k0 = k0 + BN;
            v4::mbarrier_wait(&bars[v4::kKFree], tile & 1);
            v4::load_tile_async<BN, D, C::KP, C::kThreads>(sK, k_bh + (size_t)next_k0 * D, seqlen_k - next_k0, tid);
            v4::cp_async_mbarrier_arrive(&bars[v4::kKFull]);
          }
        }
      }
      if (c0 + C::kPChunk < BN) __syncwarp();  // the chunk is read before the next one overwrites it
    }
    if constexpr (C::kSplit) v4::mbarrier_arrive(&bars[v4::kVFree]);  // this thread is done reading sV
    // Interleaved: the barrier at the top of the next iteration fences sV and sP before V(tile + 1).
    if constexpr (C::kStages == 2) __syncthreads();  // every warp is done with this stage (and its P)
  }

  // Every row saw key 0, so its sum is >= 1 after the reduction over its 8 lanes.
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float sum = row_sum[i];
#pragma unroll
    for (int lane_bit = 1; lane_bit < C::kThreadsX; lane_bit *= 2)
      sum += __shfl_xor_sync(v4::kFullMask, sum, lane_bit);
    const float inv_sum = 1.f / sum;
    const int row = q0 + ty + TY * i;
    if (row < seqlen_q) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float4 out = make_float4(acc_o[i][4 * g + 0] * inv_sum, acc_o[i][4 * g + 1] * inv_sum,
                                       acc_o[i][4 * g + 2] * inv_sum, acc_o[i][4 * g + 3] * inv_sum);
        *reinterpret_cast<float4*>(o_bh + (size_t)row * D + 32 * g + 4 * tx) = out;
      }
    }
  }
}

namespace v4 {

// The configurations the launcher uses, per head_dim (ptxas for sm_90a: registers; shared memory
// decides CTAs per SM). benchmarks/fp32_notes.md has the measurements behind the choice. The last
// parameter is the K/V schedule: 1 interleaved, 2 two-stage, 3 split-phase (none given: 1).
//                                  D  TM TN threads minCTAs            BM x BN  schedule  regs  smem     CTAs/SM
using Default32 = V4Config<32, 8, 8, 128, 2, 4, 2, 0, 2>;       // 128 x 64  2         254   88.0 KB  2
using Default64 = V4Config<64, 8, 8, 128, 2, 2, 2>;             // 128 x 64  1         254  103.0 KB  2 (v3's)
using Default128 = V4Config<128, 4, 4, 128, 2, 4, 2, 0, 3>;     //  64 x 32  3         222   75.5 KB  2 (v3's)

template <class C>
const char* launch(const LabAttentionArgs* args, cudaStream_t stream) {
  const cudaError_t err = lab_set_smem(attention_fwd_v4_kernel<C>, C::kSmemBytes);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const dim3 grid((unsigned)lab_cdiv(args->seqlen_q, C::BM), (unsigned)(args->batch * args->heads));
  attention_fwd_v4_kernel<C><<<grid, C::kThreads, C::kSmemBytes, stream>>>(
      static_cast<const float*>(args->q), static_cast<const float*>(args->k),
      static_cast<const float*>(args->v), static_cast<float*>(args->o), args->seqlen_q,
      args->seqlen_k, args->causal, args->softmax_scale);
  return lab_last_launch_error();
}

#ifdef LAB_TUNING
// Candidate configurations for `lab tune --variant v4` (the tuning contract of common.cuh); the
// launcher's own choice per head_dim (Default32/64/128 above) is timed beside them as "default".
static const LabTuneCandidate kCandidates32[] = {
    {"TM8 TN8 T128 min2 u4,2 s2", launch<V4Config<32, 8, 8, 128, 2, 4, 2, 0, 2>>},
    {"TM8 TN8 T128 min2 u4,2", launch<V4Config<32, 8, 8, 128, 2, 4, 2>>},
    {"TM8 TN8 T128 min2 u1,2 mb", launch<V4Config<32, 8, 8, 128, 2, 1, 2, 0, 3>>},
};
static const LabTuneCandidate kCandidates64[] = {
    {"TM8 TN8 T128 min2 u2,2", launch<V4Config<64, 8, 8, 128, 2, 2, 2>>},
    {"TM8 TN8 T128 min2 u2,4", launch<V4Config<64, 8, 8, 128, 2, 2, 4>>},
    {"TM8 TN8 T128 min2 u4,2", launch<V4Config<64, 8, 8, 128, 2, 4, 2>>},
    {"TM8 TN8 T128 min2 u1,4", launch<V4Config<64, 8, 8, 128, 2, 1, 4>>},
    {"TM8 TN8 T128 min2 u1,2", launch<V4Config<64, 8, 8, 128, 2, 1, 2>>},
    {"TM8 TN8 T128 min2 u2,2 mb", launch<V4Config<64, 8, 8, 128, 2, 2, 2, 0, 3>>},
    {"TM8 TN4 T128 min2 u4,2 s2", launch<V4Config<64, 8, 4, 128, 2, 4, 2, 0, 2>>},
};
static const LabTuneCandidate kCandidates128[] = {
    {"TM4 TN4 T128 min2 u4,2 mb", launch<V4Config<128, 4, 4, 128, 2, 4, 2, 0, 3>>},
    {"TM4 TN4 T128 min2 u4,2", launch<V4Config<128, 4, 4, 128, 2, 4, 2>>},
    {"TM4 TN4 T128 min2 u4,2 s2", launch<V4Config<128, 4, 4, 128, 2, 4, 2, 0, 2>>},
};
static LabTuneList candidates(int head_dim) {
  switch (head_dim) {
    case 32: return lab_tune_list(kCandidates32);
    case 64: return lab_tune_list(kCandidates64);
    case 128: return lab_tune_list(kCandidates128);
    default: return {nullptr, 0};
  }
}
#endif

}  // namespace v4

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

static const char* refuse(const LabAttentionArgs* args) {
  if (args->dtype != LAB_FLOAT32) return "v4_double_buffer supports float32 only";
  if (args->batch < 1 || args->heads < 1 || args->seqlen_q < 1 || args->seqlen_k < 1)
    return "v4_double_buffer needs batch, heads, seqlen_q and seqlen_k >= 1";
  if ((long long)args->batch * args->heads > 65535)
    return "v4_double_buffer puts batch * heads on grid.y: batch * heads must be <= 65535";
  if (!aligned16(args->q) || !aligned16(args->k) || !aligned16(args->v) || !aligned16(args->o))
    return "v4_double_buffer needs 16-byte aligned q, k, v and o (float4 loads); pass freshly allocated tensors";
  if (args->head_dim != 32 && args->head_dim != 64 && args->head_dim != 128)
    return "v4_double_buffer supports head_dim 32, 64 or 128";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v4(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args)) return why;
  switch (args->head_dim) {
    case 32: return v4::launch<v4::Default32>(args, stream);
    case 64: return v4::launch<v4::Default64>(args, stream);
    default: return v4::launch<v4::Default128>(args, stream);
  }
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v4_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? lab_tune_labels(v4::candidates(head_dim)) : "";
}
LAB_EXPORT const char* lab_forward_v4_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args)) return why;
  return lab_tune_launch(v4::candidates(args->head_dim), args, stream, config);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v4"
// slug = "double_buffer"
// title = "Async K/V loads: v3 plus cp.async K/V copies that run under the matrix products"
// dtypes = ["float32"]
// head_dims = [32, 64, 128]
// min_cc = "8.0"             # cp.async
// attacks = ["latency-bound"]
// grid = "q-tiles,bh"        # query tiles on grid.x, batch*heads on grid.y (<= 65535, refused above)
// aligned16 = true           # float4 and cp.async 16-byte copies: misaligned q, k, v, o are refused
// lab:end
