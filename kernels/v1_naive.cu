// v1_naive: the starting rung, the flash-attention-minimal design in fp32.
//
// What changed: nothing yet; this is the baseline every later rung is measured against. One CTA
//   per (batch, head) walks the query tiles of kBr rows one after another; thread t owns query row
//   t of the tile. For each K/V tile of kBc rows staged in shared memory, the thread scores its row
//   against the tile, then folds the tile into its output with the online softmax: a running max m
//   and running sum l, the accumulator rescaled by exp(m_old - m_new) whenever the max grows.
// Bottleneck attacked: none (baseline). What we expect Nsight Compute to show:
//   small-grid: B*H CTAs of one warp each, far fewer than the SMs can hold;
//   uncoalesced-global: thread t loads row t of every tile one 4-byte float at a time, so one warp
//     load touches 32 rows that are D*4 bytes apart;
//   bank-conflicts: row-per-thread reads of sQ/sO/sS ([row][d] with a row pitch that is a multiple
//     of 32 words) put all 32 lanes of a warp in one shared-memory bank.
// Predicted gain: baseline. Expected thousands of times slower than SDPA in fp16 (a kernel of this
//   design took 43 ms at B=1, H=12, N=512, D=64 on an H200).
// Measured: NVIDIA H200, 2026-11-21, B=8 H=16 N=1024 D=64 fp32: 66.2 ms median (0.52 TFLOP/s),
//   770x slower than SDPA cuDNN in fp16 and 64x slower than SDPA efficient in fp32. ncu: grid 128
//   x block 32 (one warp per SM), short-scoreboard stalls 62% of stalls, global loads use 4 of each
//   32-byte sector, ~21-way bank conflicts on shared stores. (profiles/examples/*-v1-*)
// Profile: lab profile --variant v1
//
// Layout: Q, K, V, O are (B, H, N, D) contiguous fp32. Causal masking is top-left aligned: query i
// attends keys j <= i, also when seqlen_q != seqlen_k (as torch's scaled_dot_product_attention).
#include <math.h>

#include "common.cuh"

namespace {

constexpr int kBr = 32;  // query rows per tile = threads per CTA (one thread per query row)
constexpr int kBc = 32;  // key/value rows per tile; equal to kBr so each thread loads one K/V row

// Dynamic shared memory: sQ [kBr][D], sK [kBc][D], sV [kBc][D], sO [kBr][D], sS [kBr][kBc].
template <int D>
constexpr size_t smem_bytes() {
  return sizeof(float) * (2 * kBr * D + 2 * kBc * D + kBr * kBc);
}

}  // namespace

// At global scope (not in the anonymous namespace) so that Nsight and ptxas show a plain name.
template <int D>
__global__ void __launch_bounds__(kBr)
attention_fwd_v1_kernel(const float* __restrict__ q,  // [B, H, seqlen_q, D]
                        const float* __restrict__ k,  // [B, H, seqlen_k, D]
                        const float* __restrict__ v,  // [B, H, seqlen_k, D]
                        float* __restrict__ o,        // [B, H, seqlen_q, D]
                        int seqlen_q, int seqlen_k, int causal, float softmax_scale) {
  extern __shared__ __align__(16) float smem[];
  float* sQ = smem;            // [kBr][D]  this tile's query rows
  float* sK = sQ + kBr * D;    // [kBc][D]  current key tile
  float* sV = sK + kBc * D;    // [kBc][D]  current value tile
  float* sO = sV + kBc * D;    // [kBr][D]  unnormalized output accumulator
  float* sS = sO + kBr * D;    // [kBr][kBc] scores, then probabilities, of the current tile

  const int tx = threadIdx.x;
  const size_t bh = blockIdx.x;  // one CTA per (batch, head)
  // size_t offsets: B*H*N*D can pass 2^31 elements.
  const float* q_bh = q + bh * (size_t)seqlen_q * D;
  const float* k_bh = k + bh * (size_t)seqlen_k * D;
  const float* v_bh = v + bh * (size_t)seqlen_k * D;
  float* o_bh = o + bh * (size_t)seqlen_q * D;

  float* my_q = sQ + tx * D;
  float* my_o = sO + tx * D;
  float* my_s = sS + tx * kBc;

  for (int q0 = 0; q0 < seqlen_q; q0 += kBr) {
    const int row = q0 + tx;
    const bool row_valid = row < seqlen_q;  // the last query tile may be ragged
    // Each thread reads and writes only its own rows of sQ and sO, so no barrier is needed here.
    if (row_valid) {
      for (int d = 0; d < D; ++d) {
        my_q[d] = q_bh[(size_t)row * D + d];
        my_o[d] = 0.f;
      }
    }
    float row_max = -INFINITY;  // m: running max of this row's scores
    float row_sum = 0.f;        // l: running sum of exp(score - m)

    // Under causal masking no key past the tile's last query row is visible, so stop there.
    const int kv_end = causal ? min(seqlen_k, q0 + kBr) : seqlen_k;
    for (int k0 = 0; k0 < kv_end; k0 += kBc) {
      const int kv_rows = min(kBc, seqlen_k - k0);  // the last key tile may be ragged
      __syncthreads();  // everyone is done reading the previous K/V tile
      if (tx < kv_rows) {
        for (int d = 0; d < D; ++d) {
          sK[tx * D + d] = k_bh[(size_t)(k0 + tx) * D + d];
          sV[tx * D + d] = v_bh[(size_t)(k0 + tx) * D + d];
        }
      }
      __syncthreads();  // the tile is complete before anyone reads it

      if (!row_valid) continue;  // no early return: the barriers above need every thread
      // Keys k0 .. k0+visible-1 of this tile are visible to this row.
      const int visible = causal ? min(kv_rows, row - k0 + 1) : kv_rows;
      if (visible <= 0) continue;

      float tile_max = -INFINITY;
      for (int y = 0; y < visible; ++y) {
        float score = 0.f;
#pragma unroll 8
        for (int d = 0; d < D; ++d) score += my_q[d] * sK[y * D + d];
        score *= softmax_scale;
        my_s[y] = score;
        tile_max = fmaxf(tile_max, score);
      }
      const float new_max = fmaxf(row_max, tile_max);
      const float rescale = expf(row_max - new_max);  // exp(-inf) = 0 on the first tile
      float tile_sum = 0.f;
      for (int y = 0; y < visible; ++y) {
        const float p = expf(my_s[y] - new_max);
        my_s[y] = p;
        tile_sum += p;
      }
      row_sum = row_sum * rescale + tile_sum;
      for (int d = 0; d < D; ++d) {
        float acc = my_o[d] * rescale;
        for (int y = 0; y < visible; ++y) acc += my_s[y] * sV[y * D + d];
        my_o[d] = acc;
      }
      row_max = new_max;
    }

    // Key 0 is visible to every row (causal or not), so row_sum > 0 here.
    if (row_valid) {
      const float inv_sum = 1.f / row_sum;
      for (int d = 0; d < D; ++d) o_bh[(size_t)row * D + d] = my_o[d] * inv_sum;
    }
  }
}

template <int D>
static const char* launch(const LabAttentionArgs* args, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D>();
  const cudaError_t err = lab_set_smem(attention_fwd_v1_kernel<D>, smem);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const unsigned grid = (unsigned)args->batch * (unsigned)args->heads;
  attention_fwd_v1_kernel<D><<<grid, kBr, smem, stream>>>(
      static_cast<const float*>(args->q), static_cast<const float*>(args->k),
      static_cast<const float*>(args->v), static_cast<float*>(args->o), args->seqlen_q,
      args->seqlen_k, args->causal, args->softmax_scale);
  return lab_last_launch_error();
}

LAB_EXPORT const char* lab_forward_v1(const LabAttentionArgs* args, cudaStream_t stream) {
  if (args->dtype != LAB_FLOAT32) return "v1_naive supports float32 only";
  if (args->batch < 1 || args->heads < 1 || args->seqlen_q < 1 || args->seqlen_k < 1)
    return "v1_naive needs batch, heads, seqlen_q and seqlen_k >= 1";
  if ((long long)args->batch * args->heads > 0x7fffffffLL)
    return "v1_naive launches one CTA per (batch, head): batch * heads must be < 2^31";
  switch (args->head_dim) {
    case 32: return launch<32>(args, stream);
    case 64: return launch<64>(args, stream);
    case 128: return launch<128>(args, stream);
    default: return "v1_naive supports head_dim 32, 64 or 128";
  }
}

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v1"
// slug = "naive"
// title = "Naive: fp32, one thread per query row, grid B x H"
// dtypes = ["float32"]
// head_dims = [32, 64, 128]
// min_cc = "7.5"
// attacks = []               # the baseline: it attacks nothing
// grid = "bh"                # one CTA per (batch, head) on grid.x
// aligned16 = false
// lab:end
