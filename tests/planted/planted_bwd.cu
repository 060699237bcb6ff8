// Planted backward-like kernels whose answer is known, for the lab's backward rules
// (lab/analysis/rules/reduction_traffic.py): the same dQ-shaped work, reduced two ways.
//
//   kernel               planted answer            how
//   planted_dq_atomics   reduction-traffic         528 CTAs ("K/V tiles") each add a partial dQ [1024 x 64]
//                                                  fp32 into ONE accumulator with atomicAdd (RED.E.ADD.F32):
//                                                  528 reductions per address, contended in L2
//   planted_dq_private   (no reduction traffic)    the same partials stored with plain stores, one slice per
//                                                  CTA (what a split-K with a separate sum would write)
//
// Build: nvcc -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -o planted_bwd planted_bwd.cu
// Run:   ./planted_bwd          (each kernel once; tests/planted/record_bwd.sh profiles it with ncu)

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t err_ = (x);                                                                   \
    if (err_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_));    \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

constexpr int kRows = 1024, kDim = 64, kElems = kRows * kDim;  // one head's dQ
constexpr int kTiles = 528;                                     // 4 waves of one CTA per SM on 132 SMs
constexpr int kThreads = 128;

// Each CTA's partial dQ element: a cheap function of Q so that nothing folds away.
__device__ __forceinline__ float partial(const float* __restrict__ q, int i, int tile) {
  return q[i] * (1.0f + 0.001f * (float)tile);
}

__global__ void planted_dq_atomics(const float* __restrict__ q,  // [kRows, kDim]
                                   float* __restrict__ dq) {     // [kRows, kDim], fp32 accumulator
  for (int i = threadIdx.x; i < kElems; i += blockDim.x)
    atomicAdd(dq + i, partial(q, i, blockIdx.x));  // result unused: compiles to RED, not ATOM
}

__global__ void planted_dq_private(const float* __restrict__ q,  // [kRows, kDim]
                                   float* __restrict__ dq_part) {  // [kTiles, kRows, kDim]
  float* mine = dq_part + (size_t)blockIdx.x * kElems;
  for (int i = threadIdx.x; i < kElems; i += blockDim.x) mine[i] = partial(q, i, blockIdx.x);
}

int main() {
  float *q, *dq, *dq_part;
  CHECK(cudaMalloc(&q, kElems * sizeof(float)));
  CHECK(cudaMalloc(&dq, kElems * sizeof(float)));
  CHECK(cudaMalloc(&dq_part, (size_t)kTiles * kElems * sizeof(float)));
  CHECK(cudaMemset(q, 0, kElems * sizeof(float)));
  CHECK(cudaMemset(dq, 0, kElems * sizeof(float)));
  planted_dq_atomics<<<kTiles, kThreads>>>(q, dq);
  CHECK(cudaGetLastError());
  planted_dq_private<<<kTiles, kThreads>>>(q, dq_part);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  printf("planted_bwd: 2 kernels launched\n");
  return 0;
}
