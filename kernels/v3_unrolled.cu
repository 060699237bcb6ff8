// v3_unrolled: v2 with the query dimension split across CTAs, several warps per CTA, and a
// register-tiled, fully unrolled FFMA core on bank-conflict-free shared memory.
//
// What changed:
//   - Grid (ceil(seqlen_q / BM), B*H) instead of B*H: each CTA owns one tile of BM query rows of one
//     (batch, head) and walks the K/V tiles once. Causal CTAs stop at their last visible key tile
//     and are launched heaviest first (blockIdx.x counts down the query tiles).
//   - kThreads = 128 threads (4 warps) per CTA instead of one warp, arranged as kThreadsY x 8.
//     Thread (ty, tx) owns query rows ty + kThreadsY*i (i < TM) and keys tx + 8*j (j < TN) of the
//     score tile S = Q K^T, and output columns 32*g + 4*tx + e (g < D/32, e < 4) of the same rows
//     in O. S and O live in registers (TM*TN + TM*D/8 floats per thread) instead of shared memory.
//   - Inner loops over D (for S) and over the keys (for P V) are unrolled and step four at a time:
//     one 16-byte shared load of Q (or P) and one of K (or V) feed 4*TM*TN (4*TM*D/8) FFMAs; with
//     TM = 8 that is 16 FFMA per 16-byte load instead of v2's one FFMA per 4-byte load.
//   - Shared layouts: sQ and sK rows padded to D+4 floats (the 4 rows a warp's lanes read for one
//     i are consecutive, 16 bytes apart in bank terms: one wavefront; the 8 K rows of one j
//     likewise); sP (probabilities, [BM][BN+8], or [BM][kPChunk+8] when P is staged kPChunk keys
//     at a time) padded so the scalar stores of a warp hit 32 different banks (row step 8 or 24
//     banks, column step 1) and its 16-byte loads stay conflict-free.
//     v2's per-thread rows in shared memory ([row][d], pitch a multiple of 32 words) are gone.
//   - Q is scaled by softmax_scale*log2(e) once, on its way into shared memory, so the softmax
//     runs on exp2 of the scores with no per-score multiply. Row sums are kept per thread and
//     reduced across the 8 lanes of a row (warp shuffles) once, at the end; the row max is reduced
//     per tile (3 shuffles per row).
//   - float4 global loads (v2) are kept for Q, K and V, and O is stored as float4 from registers.
// Bottleneck attacked (the v2 profile, profiles/examples/*-v2-B8-H16-N1024-D64-float32, H200,
//   `lab analyze profiles/examples/*v2*/profile.ncu-rep`): 65.2 ms, 0.53 TFLOP/s, FP32 at 0.8% of
//   peak and issue at 2.6%. small-grid: grid 128 x block 32, 0.16 waves, one warp on most SMs.
//   occupancy-limited: 1.5 warps per scheduler at most (theoretical), 1.56% warps active.
//   latency-bound: short-scoreboard stalls 62% of all stalls (shared-memory loads feeding one FFMA
//   each), 9.3 cycles per issued instruction. bank-conflicts: 4.05e9 conflicted shared-load and
//   4.2e8 conflicted shared-store wavefronts: 5.5-way (5.46e9 shared wavefronts / 9.87e8 without
//   conflicts, the lab's n-way), from the per-row [row][d] layout.
// Predicted gain (written before the first timing): 30-60x over v2 at B=8,H=16,N=1024,D=64
//   (65.2 ms -> 1.1-2.2 ms, 16-30 TFLOP/s, 25-45% of the 67 TFLOP/s FFMA peak): the grid becomes
//   1024 CTAs (8 query tiles x 128 heads, ~3 waves at 2-3 CTAs/SM), every FFMA operand comes from
//   a register, and shared loads are 16-byte and conflict-free. What should remain: the K/V tile
//   loads are synchronous (global -> register -> shared between two barriers), hidden only by the
//   other CTAs on the SM; that is v4's target.
// Measured (NVIDIA H200, 2026-11-21, `lab bench`: median of 30, L2 flushed; details and every
//   tuning run in benchmarks/fp32_notes.md): B=8,H=16,N=1024,D=64: 0.844 ms, 40.7 TFLOP/s (61% of
//   the FFMA peak), 77.2x v2 (65.13 ms), 1.22x SDPA's efficient kernel in fp32. The issue's target
//   shape N=2048: 3.308 ms, 41.6 TFLOP/s, 1.19x SDPA efficient fp32 (causal: 1.938 ms, 1.12x).
//   D=32 (N=2048): 1.83x SDPA; D=128 (N=2048): 7.833 ms, 0.77x SDPA (below it). Far above the
//   prediction: the 64-256 independent accumulators per thread hide the shared-load latency that
//   I expected to dominate. The default D=64 tile was picked by measurement: 128 x 64, TM8 TN8
//   (254 registers, 103 KB, 2 CTAs/SM), key loop unrolled by 2. ncu: compute-bound, FMA pipe 64%,
//   issue slots 73%, stall samples: dispatch 12.5%, short scoreboard 8%, long scoreboard 1.9%.
// Profile: lab profile --variant v3
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
          int P_CHUNK_ = 0>
struct V3Config {
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
  static constexpr size_t kSmemFloats = (size_t)BM * QP + (size_t)BN * KP + (size_t)BN * VP + (size_t)BM * PP;
  static constexpr size_t kSmemBytes = kSmemFloats * sizeof(float);
  static_assert(kThreads % 32 == 0 && kThreadsY % 4 == 0, "whole warps of 4 row groups");
  static_assert(D % 32 == 0, "D must be 32, 64 or 128");
  static_assert(QP % 4 == 0 && KP % 4 == 0 && VP % 4 == 0 && PP % 4 == 0, "16-byte aligned rows");
  static_assert(kPChunk % 16 == 0 && BN % kPChunk == 0, "P chunks of 16, 32 or 64 keys that tile BN");
};

namespace v3 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

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

}  // namespace v3

// At global scope (not in a namespace) so that Nsight and ptxas show a short name.
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
attention_fwd_v3_kernel(const float* __restrict__ q,  // [B, H, seqlen_q, D]
                        const float* __restrict__ k,  // [B, H, seqlen_k, D]
                        const float* __restrict__ v,  // [B, H, seqlen_k, D]
                        float* __restrict__ o,        // [B, H, seqlen_q, D]
                        int seqlen_q, int seqlen_k, int causal, float softmax_scale) {
  constexpr int D = C::D, TM = C::TM, TN = C::TN, BM = C::BM, BN = C::BN, G = C::kGroups;
  constexpr int TY = C::kThreadsY;
  extern __shared__ __align__(16) float smem[];
  float* sQ = smem;               // [BM][QP]  this CTA's query rows, scaled by softmax_scale*log2(e)
  float* sK = sQ + BM * C::QP;    // [BN][KP]  current key tile
  float* sV = sK + BN * C::KP;    // [BN][VP]  current value tile
  float* sP = sV + BN * C::VP;    // [BM][PP]  probabilities of the current tile (each warp its rows)

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

  // The barrier at the top of the K/V loop orders these writes before any read of sQ.
  v3::load_tile<BM, D, C::QP, C::kThreads>(sQ, q_bh + (size_t)q0 * D, seqlen_q - q0, tid,
                                           softmax_scale * v3::kLog2e);

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

  // Under causal masking no key past the tile's last query row is visible, so stop there.
  const int kv_end = causal ? min(seqlen_k, q0 + BM) : seqlen_k;
  for (int k0 = 0; k0 < kv_end; k0 += BN) {
    __syncthreads();  // everyone is done reading the previous K/V tile
    v3::load_tile<BN, D, C::KP, C::kThreads>(sK, k_bh + (size_t)k0 * D, seqlen_k - k0, tid, 1.f);
    v3::load_tile<BN, D, C::VP, C::kThreads>(sV, v_bh + (size_t)k0 * D, seqlen_k - k0, tid, 1.f);
    __syncthreads();  // the tile is complete before anyone reads it

    // S = Q K^T for this thread's TM x TN scores, four d at a time from 16-byte shared loads.
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.f;
#pragma unroll C::kUnrollD
    for (int d = 0; d < D; d += 4) {
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
        tile_max = fmaxf(tile_max, __shfl_xor_sync(v3::kFullMask, tile_max, lane_bit));
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

      // Four keys per step: one 16-byte load of P per row and of V per column group.
#pragma unroll C::kUnrollN
      for (int n = 0; n < C::kPChunk; n += 4) {
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
            const float p = v3::component(pf[i], e);
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
      if (c0 + C::kPChunk < BN) __syncwarp();  // the chunk is read before the next one overwrites it
    }
    // The next tile's P stores come after the barrier at the top of the loop, so no second fence.
  }

  // Every row saw key 0, so its sum is >= 1 after the reduction over its 8 lanes.
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float sum = row_sum[i];
#pragma unroll
    for (int lane_bit = 1; lane_bit < C::kThreadsX; lane_bit *= 2)
      sum += __shfl_xor_sync(v3::kFullMask, sum, lane_bit);
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

namespace v3 {

// The configurations the launcher uses, per head_dim (ptxas for sm_90a: registers; shared memory
// decides CTAs per SM). benchmarks/fp32_notes.md has the measurements behind the choice.
//                                  D  TM TN threads minCTAs   BM x BN  regs  smem     CTAs/SM
using Default32 = V3Config<32, 8, 8, 128, 2, 4, 2>;   // 128 x 64  254   71.0 KB  2 (registers)
using Default64 = V3Config<64, 8, 8, 128, 2, 1, 2>;   // 128 x 64  254  103.0 KB  2
using Default128 = V3Config<128, 4, 4, 128, 2, 4, 2>; //  64 x 32  226   75.5 KB  2

template <class C>
const char* launch(const LabAttentionArgs* args, cudaStream_t stream) {
  const cudaError_t err = lab_set_smem(attention_fwd_v3_kernel<C>, C::kSmemBytes);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const dim3 grid((unsigned)lab_cdiv(args->seqlen_q, C::BM), (unsigned)(args->batch * args->heads));
  attention_fwd_v3_kernel<C><<<grid, C::kThreads, C::kSmemBytes, stream>>>(
      static_cast<const float*>(args->q), static_cast<const float*>(args->k),
      static_cast<const float*>(args->v), static_cast<float*>(args->o), args->seqlen_q,
      args->seqlen_k, args->causal, args->softmax_scale);
  return lab_last_launch_error();
}

#ifdef LAB_TUNING
// Candidate configurations for `lab tune --variant v3` (the tuning contract of common.cuh); the
// launcher's own choice per head_dim (Default32/64/128 above) is timed beside them as "default".
static const LabTuneCandidate kCandidates32[] = {
    {"TM8 TN8 T128 min2 u4,2", launch<V3Config<32, 8, 8, 128, 2, 4, 2>>},
    {"TM8 TN8 T128 min2 u1,1", launch<V3Config<32, 8, 8, 128, 2, 1, 1>>},
    {"TM8 TN8 T128 min2 u2,2", launch<V3Config<32, 8, 8, 128, 2, 2, 2>>},
};
static const LabTuneCandidate kCandidates64[] = {
    {"TM8 TN8 T128 min2 u1,2", launch<V3Config<64, 8, 8, 128, 2, 1, 2>>},
    {"TM8 TN8 T128 min2 u2,2", launch<V3Config<64, 8, 8, 128, 2, 2, 2>>},
    {"TM8 TN8 T256 min1 u1,2", launch<V3Config<64, 8, 8, 256, 1, 1, 2>>},
    {"TM8 TN8 T128 min2 u2,1", launch<V3Config<64, 8, 8, 128, 2, 2, 1>>},
};
static const LabTuneCandidate kCandidates128[] = {
    {"TM4 TN4 T128 min2 u4,2", launch<V3Config<128, 4, 4, 128, 2, 4, 2>>},
    {"TM4 TN4 T128 min2 u1,1", launch<V3Config<128, 4, 4, 128, 2, 1, 1>>},
    {"TM4 TN4 T128 min2 u2,2", launch<V3Config<128, 4, 4, 128, 2, 2, 2>>},
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

}  // namespace v3

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

static const char* refuse(const LabAttentionArgs* args) {
  if (args->dtype != LAB_FLOAT32) return "v3_unrolled supports float32 only";
  if (args->batch < 1 || args->heads < 1 || args->seqlen_q < 1 || args->seqlen_k < 1)
    return "v3_unrolled needs batch, heads, seqlen_q and seqlen_k >= 1";
  if ((long long)args->batch * args->heads > 65535)
    return "v3_unrolled puts batch * heads on grid.y: batch * heads must be <= 65535";
  if (!aligned16(args->q) || !aligned16(args->k) || !aligned16(args->v) || !aligned16(args->o))
    return "v3_unrolled needs 16-byte aligned q, k, v and o (float4 loads); pass freshly allocated tensors";
  if (args->head_dim != 32 && args->head_dim != 64 && args->head_dim != 128)
    return "v3_unrolled supports head_dim 32, 64 or 128";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v3(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args)) return why;
  switch (args->head_dim) {
    case 32: return v3::launch<v3::Default32>(args, stream);
    case 64: return v3::launch<v3::Default64>(args, stream);
    default: return v3::launch<v3::Default128>(args, stream);
  }
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v3_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? lab_tune_labels(v3::candidates(head_dim)) : "";
}
LAB_EXPORT const char* lab_forward_v3_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args)) return why;
  return lab_tune_launch(v3::candidates(args->head_dim), args, stream, config);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v3"
// slug = "unrolled"
// title = "Unrolled: query tiles across CTAs, 4 warps, register-tiled FFMA on conflict-free shared memory"
// dtypes = ["float32"]
// head_dims = [32, 64, 128]
// min_cc = "7.5"
// attacks = ["small-grid", "occupancy-limited", "bank-conflicts"]
// grid = "q-tiles,bh"        # query tiles on grid.x, batch*heads on grid.y (<= 65535, refused above)
// aligned16 = true           # float4 loads: the launcher refuses q, k, v, o not 16-byte aligned
// lab:end
