// my1_minimal: my first flash attention kernel, written the way flash-attention-minimal does it.
//
// lab:rung
// id = "my1"
// slug = "minimal"
// title = "My first kernel: flash-attention-minimal, fp32, Br = Bc = 32, O, l, m kept in global memory"
// dtypes = ["float32"]
// head_dims = [64, 128]
// min_cc = "7.5"
// attacks = []
// grid = "bh"                 # one CTA per (batch, head)
// aligned16 = false
// lab:end
//
// What changed: nothing yet, this is where I start (an example of a user's own rung, kept in
//   examples/workspace/ so that the lab can be tried on a kernel it did not write). The design of
//   tspeterkim/flash-attention-minimal: one CTA of Br = 32 threads per (batch, head); the outer
//   loop walks the K/V tiles (Bc = 32 rows), the inner loop every query tile, and thread t owns
//   query row t of that tile. Because the query tiles are visited once per K/V tile, the running
//   output O, row max m and row sum l live in global memory and are read and rewritten on every
//   visit. I added what the original lacks for the lab's check: a causal mask (top-left), ragged
//   lengths (seqlen_q != seqlen_k, not multiples of 32) and D = 128 (more than 48 KB of shared
//   memory, so the launcher raises the limit).
// Bottleneck attacked: none (the first version). I expect it to be slow: B*H CTAs of one warp.
// Predicted gain: none; I expect it within 2x of the lab's own naive rung.
// Measured: see `lab report` in this folder (runs recorded on an H200 under profiles/).
// Profile: lab profile --variant my1
#include "common.cuh"

#include <cmath>

namespace my1 {

constexpr int Br = 32;  // query rows per tile = threads per CTA
constexpr int Bc = 32;  // key rows per tile

template <int D>
__global__ void forward_kernel(const float* Q, const float* K, const float* V, float* O, float* l, float* m,
                               int Nq, int Nk, int causal, float softmax_scale) {
  const int tx = threadIdx.x;
  const int bh = blockIdx.x * gridDim.y + blockIdx.y;  // grid (B, H)
  const float* q = Q + (size_t)bh * Nq * D;
  const float* k = K + (size_t)bh * Nk * D;
  const float* v = V + (size_t)bh * Nk * D;
  float* o = O + (size_t)bh * Nq * D;
  float* lb = l + (size_t)bh * Nq;
  float* mb = m + (size_t)bh * Nq;

  extern __shared__ float sram[];
  float* Qi = sram;            // [Br][D]
  float* Kj = Qi + Br * D;     // [Bc][D]
  float* Vj = Kj + Bc * D;     // [Bc][D]
  float* S = Vj + Bc * D;      // [Br][Bc]

  const int Tc = (Nk + Bc - 1) / Bc;
  const int Tr = (Nq + Br - 1) / Br;
  for (int j = 0; j < Tc; j++) {
    // load Kj, Vj: thread tx loads row tx (zeros past the end)
    const int krow = j * Bc + tx;
    for (int x = 0; x < D; x++) {
      Kj[tx * D + x] = krow < Nk ? k[(size_t)krow * D + x] : 0.f;
      Vj[tx * D + x] = krow < Nk ? v[(size_t)krow * D + x] : 0.f;
    }
    __syncthreads();

    for (int i = 0; i < Tr; i++) {
      const int row = i * Br + tx;
      if (row < Nq) {
        for (int x = 0; x < D; x++) Qi[tx * D + x] = q[(size_t)row * D + x];
        const float row_m_prev = mb[row];
        const float row_l_prev = lb[row];

        // S = Q K^T * scale, row max
        float row_m = -INFINITY;
        for (int y = 0; y < Bc; y++) {
          const int col = j * Bc + y;
          float sum = 0.f;
          for (int x = 0; x < D; x++) sum += Qi[tx * D + x] * Kj[y * D + x];
          sum *= softmax_scale;
          if (col >= Nk || (causal && col > row)) sum = -INFINITY;
          S[tx * Bc + y] = sum;
          row_m = fmaxf(row_m, sum);
        }
        const float row_m_new = fmaxf(row_m_prev, row_m);
        if (row_m_new != -INFINITY) {  // a row that has seen no key yet stays as it is
          // P = exp(S - row_m), row sum
          float row_l = 0.f;
          for (int y = 0; y < Bc; y++) {
            const float p = S[tx * Bc + y] == -INFINITY ? 0.f : __expf(S[tx * Bc + y] - row_m);
            S[tx * Bc + y] = p;
            row_l += p;
          }
          const float alpha = row_m_prev == -INFINITY ? 0.f : __expf(row_m_prev - row_m_new);
          const float beta = row_m == -INFINITY ? 0.f : __expf(row_m - row_m_new);
          const float row_l_new = alpha * row_l_prev + beta * row_l;

          // O = (l_prev * alpha * O + beta * P V) / l_new
          for (int x = 0; x < D; x++) {
            float pv = 0.f;
            for (int y = 0; y < Bc; y++) pv += S[tx * Bc + y] * Vj[y * D + x];
            o[(size_t)row * D + x] = (row_l_prev * alpha * o[(size_t)row * D + x] + beta * pv) / row_l_new;
          }
          mb[row] = row_m_new;
          lb[row] = row_l_new;
        }
      }
    }
    __syncthreads();  // the next K/V tile overwrites Kj, Vj
  }
}

__global__ void init_kernel(float* o, size_t o_elems, float* l, float* m, size_t rows) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < o_elems; i += (size_t)gridDim.x * blockDim.x) {
    o[i] = 0.f;
    if (i < rows) {
      l[i] = 0.f;
      m[i] = -INFINITY;
    }
  }
}

template <int D>
const char* launch(const LabAttentionArgs* a, cudaStream_t stream) {
  const size_t rows = (size_t)a->batch * a->heads * a->seqlen_q;
  float* l = nullptr;
  float* m = nullptr;
  // l and m: scratch in global memory, as flash-attention-minimal keeps them
  if (cudaMallocAsync(&l, rows * sizeof(float), stream) != cudaSuccess ||
      cudaMallocAsync(&m, rows * sizeof(float), stream) != cudaSuccess)
    return "my1: cannot allocate l and m";
  init_kernel<<<256, 256, 0, stream>>>(static_cast<float*>(a->o), rows * a->head_dim, l, m, rows);
  const size_t smem = (size_t)(Br * D + 2 * Bc * D + Br * Bc) * sizeof(float);
  auto kernel = forward_kernel<D>;
  static const cudaError_t attr = lab_set_smem(kernel, smem);
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  dim3 grid(a->batch, a->heads);
  kernel<<<grid, Br, smem, stream>>>(static_cast<const float*>(a->q), static_cast<const float*>(a->k),
                                     static_cast<const float*>(a->v), static_cast<float*>(a->o), l, m,
                                     a->seqlen_q, a->seqlen_k, a->causal, a->softmax_scale);
  const char* err = lab_last_launch_error();
  cudaFreeAsync(l, stream);
  cudaFreeAsync(m, stream);
  return err;
}

}  // namespace my1

LAB_EXPORT const char* lab_forward_my1(const LabAttentionArgs* args, cudaStream_t stream) {
  if (args->dtype != LAB_FLOAT32) return "my1 supports float32 only";
  if (args->heads > 65535) return "my1 puts heads on grid.y: heads must be <= 65535";
  switch (args->head_dim) {
    case 64: return my1::launch<64>(args, stream);
    case 128: return my1::launch<128>(args, stream);
    default: return "my1 supports head_dim 64 or 128";
  }
}
