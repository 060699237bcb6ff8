// Planted bottlenecks: ten small kernels, each built to have ONE known bottleneck, so that
// lab/analysis/findings.py can be tested on real Nsight Compute reports whose right answer is known.
//
//   kernel                   planted class         how
//   planted_uncoalesced      uncoalesced-global    thread t reads its own 128-byte row: lanes 128 B apart
//   planted_bank_conflicts   bank-conflicts        all 32 lanes read one shared-memory bank (32-way)
//   planted_small_grid       small-grid            4 CTAs on a GPU with ~132 SMs
//   planted_local_memory     local-memory          a per-thread array indexed at run time (not registers)
//   planted_fma_bound        compute-bound         8 independent FFMA chains per thread, no memory
//   planted_bandwidth_copy   memory-bound          a float4 copy of 512 MB (256 MB read, 256 MB written)
//   planted_divergence       divergence            each lane of a warp takes its own branch
//   planted_occupancy_smem   occupancy-limited     200 KB of dynamic shared memory per 128-thread block
//   planted_broadcast        (not uncoalesced)     all 32 lanes read one address: 4 bytes of a sector used,
//                                                  none wasted; the FMA work on it is the limit
//   planted_local_heavy      local-memory          a run-time-indexed per-thread array (most of the traffic)
//                                                  beside a small strided global read (uncoalesced, minor)
//
// Build: nvcc -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -o planted planted.cu
// Run:   ./planted            (each kernel once; tests/planted/record.sh profiles it with ncu)
// Sizes are fixed so the reports are comparable between runs; each kernel runs 0.05-2 ms on an H200.

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

constexpr int kRowFloats = 32;  // 128-byte rows: a warp's 32 loads touch 32 different sectors

// uncoalesced-global: like a thread-per-query-row attention kernel, thread t walks its own row.
__global__ void planted_uncoalesced(const float* __restrict__ in,  // [threads, kRowFloats]
                                    float* __restrict__ out) {     // [threads]
  size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  const float* row = in + t * kRowFloats;
  float acc = 0.f;
#pragma unroll 4
  for (int j = 0; j < kRowFloats; ++j) acc += row[j] * (float)(j + 1);
  out[t] = acc;
}

// bank-conflicts: word (lane * 32 + c) lies in bank c for every lane: 32 lanes, one bank, 32-way.
// The column order (k * 7) & 31 keeps each thread's accesses non-contiguous so that the compiler
// cannot merge them into one 128-bit load.
__global__ void planted_bank_conflicts(float* __restrict__ out, int iters) {
  extern __shared__ float tile[];  // [warps per block][32 lanes][32 columns]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* mine = tile + warp * 32 * 32 + lane * 32;
  for (int c = 0; c < 32; ++c) mine[c] = (float)(lane + c);
  __syncwarp();
  float acc = 0.f;
  for (int k = 0; k < iters; ++k) acc += mine[(k * 7) & 31];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// small-grid: coalesced, well-behaved streaming work, but only 4 CTAs for the whole GPU.
__global__ void planted_small_grid(const float* __restrict__ in, float* __restrict__ out, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  float acc = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) acc += in[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// local-memory: `arr` is indexed with values known only at run time, so it cannot live in
// registers: every access is a local-memory load or store through L1.
constexpr int kLocalFloats = 64;
__global__ void planted_local_memory(const unsigned* __restrict__ seed, float* __restrict__ out, int iters) {
  float arr[kLocalFloats];
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned s = seed[t];
  for (int i = 0; i < kLocalFloats; ++i) arr[i] = (float)(i ^ s);
  float acc = 0.f;
  for (int k = 0; k < iters; ++k) {
    unsigned a = (s + k * 13u) & (kLocalFloats - 1);
    unsigned b = (s * 5u + k * 7u) & (kLocalFloats - 1);
    acc += arr[a];
    arr[b] = acc * 0.5f;
  }
  out[t] = acc;
}

// compute-bound: eight independent FFMA chains per thread keep the FMA pipe busy; no memory
// traffic but the final store.
__global__ void planted_fma_bound(float* __restrict__ out, int iters) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  float a0 = t * 1e-7f, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
  float a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
  const float m = 0.9999f, c = 1e-4f;
  for (int k = 0; k < iters; ++k) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);
      a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);
    }
  }
  out[t] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

// memory-bound: a grid-stride float4 copy; DRAM bandwidth is the only limit.
__global__ void planted_bandwidth_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n4) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += stride) out[i] = in[i];
}

// divergence: lane L runs only in round L of 32, so each arithmetic instruction of the loop body
// executes with one active thread of 32.
__global__ void planted_divergence(float* __restrict__ out, int iters) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  float x = t * 1e-6f;
  for (int r = 0; r < 32; ++r) {
    if (lane == r) {
      for (int k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 1e-3f) * 1.0001f;
    }
  }
  out[t] = x;
}

// occupancy-limited: 200 KB of dynamic shared memory per block allows one 128-thread block (4
// warps of 64) per SM; the streaming reads then have far too few warps to hide DRAM latency.
constexpr size_t kBigSmemBytes = 200 * 1024;
__global__ void planted_occupancy_smem(const float* __restrict__ in, float* __restrict__ out, size_t n) {
  extern __shared__ float big[];  // kBigSmemBytes, only a sliver of it used: the size is the point
  size_t stride = (size_t)gridDim.x * blockDim.x;
  float acc = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) acc += in[i];
  big[threadIdx.x] = acc;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = big[(threadIdx.x + 1) % blockDim.x];
}

// broadcast: every lane of a warp reads the same word (a warp-uniform index), so a request needs one
// sector and wastes none, although only 4 of its 32 bytes are used; ncu's excessive-sector count is
// zero. Each loaded value feeds 16 dependent FFMAs: the loads are not what limits it.
__global__ void planted_broadcast(const float* __restrict__ in, float* __restrict__ out, int iters) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = t * 1e-7f;
  for (int k = 0; k < iters; ++k) {
    const float v = in[(blockIdx.x * 7 + k) & 4095];  // the same address for all 32 lanes
#pragma unroll
    for (int u = 0; u < 16; ++u) acc = fmaf(acc, v, 1e-4f);
  }
  out[t] = acc;
}

// local-memory-heavy: like planted_local_memory, plus a strided global read per iteration (lanes 32 B
// apart: 4 of 32 bytes used), which is uncoalesced but a small share of the load/store traffic. The
// local array is the cause; the uncoalesced read must rank below it.
__global__ void planted_local_heavy(const float* __restrict__ strided, float* __restrict__ out, int iters) {
  float arr[kLocalFloats];
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned s = (unsigned)t * 2654435761u;
  for (int i = 0; i < kLocalFloats; ++i) arr[i] = (float)(i ^ s);
  float acc = 0.f;
  for (int k = 0; k < iters; ++k) {
    unsigned a = (s + k * 13u) & (kLocalFloats - 1);
    unsigned b = (s * 5u + k * 7u) & (kLocalFloats - 1);
    unsigned c = (s * 3u + k * 11u) & (kLocalFloats - 1);
    acc += arr[a] * arr[c];
    arr[b] = acc * 0.5f;
    if ((k & 15) == 0) acc += strided[((size_t)t * 8 + (k >> 4)) & ((1u << 24) - 1)];  // 32 B between lanes
  }
  out[t] = acc;
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t big_floats = (size_t)64 << 20;  // 64 Mi floats = 256 MB per buffer
  float *a = nullptr, *b = nullptr;
  unsigned* seed = nullptr;
  CHECK(cudaMalloc(&a, big_floats * sizeof(float)));
  CHECK(cudaMalloc(&b, big_floats * sizeof(float)));
  CHECK(cudaMalloc(&seed, (size_t)1 << 24));
  CHECK(cudaMemset(a, 0, big_floats * sizeof(float)));
  CHECK(cudaMemset(seed, 1, (size_t)1 << 24));

  const int block = 256;
  // 2 Mi threads x 128-byte rows = the whole 256 MB buffer
  planted_uncoalesced<<<(unsigned)(big_floats / kRowFloats / block), block>>>(a, b);
  CHECK(cudaGetLastError());

  const size_t conflict_smem = (block / 32) * 32 * 32 * sizeof(float);  // 32 KB
  planted_bank_conflicts<<<sms * 8, block, conflict_smem>>>(b, 1024);
  CHECK(cudaGetLastError());

  planted_small_grid<<<4, block>>>(a, b, (size_t)2 << 20);
  CHECK(cudaGetLastError());

  planted_local_memory<<<sms * 8, block>>>(seed, b, 2048);
  CHECK(cudaGetLastError());

  planted_fma_bound<<<sms * 16, block>>>(b, 512);
  CHECK(cudaGetLastError());

  planted_bandwidth_copy<<<sms * 16, block>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<float4*>(b),
                                              big_floats / 4);
  CHECK(cudaGetLastError());

  planted_divergence<<<sms * 8, block>>>(b, 256);
  CHECK(cudaGetLastError());

  CHECK(cudaFuncSetAttribute(planted_occupancy_smem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)kBigSmemBytes));
  planted_occupancy_smem<<<sms * 8, 128, kBigSmemBytes>>>(a, b, big_floats);
  CHECK(cudaGetLastError());

  planted_broadcast<<<sms * 8, block>>>(a, b, 1024);
  CHECK(cudaGetLastError());

  planted_local_heavy<<<sms * 8, block>>>(a, b, 2048);
  CHECK(cudaGetLastError());

  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(seed));
  printf("planted: 10 kernels launched on %d SMs\n", sms);
  return 0;
}
