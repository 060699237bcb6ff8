// Flash Lab: what every rung shares. CUDA only, no torch headers.
//
// The launcher contract. Every rung file kernels/<id>_<slug>.cu exports exactly one C function,
//
//     extern "C" const char* lab_forward_<id>(const LabAttentionArgs* args, cudaStream_t stream);
//
// which launches the rung on `stream` and returns nullptr on success, or a static message saying
// why not (an unsupported head_dim or dtype, or the CUDA error of the launch). kernels/binding.cpp
// wraps it for PyTorch; the build compiles binding.cpp with -DLAB_LAUNCHER=lab_forward_<id>.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

enum LabDtype : int { LAB_FLOAT32 = 0, LAB_FLOAT16 = 1, LAB_BFLOAT16 = 2 };

struct LabAttentionArgs {
  const void* q;  // [batch, heads, seqlen_q, head_dim], contiguous
  const void* k;  // [batch, heads, seqlen_k, head_dim], contiguous
  const void* v;  // [batch, heads, seqlen_k, head_dim], contiguous
  void* o;        // [batch, heads, seqlen_q, head_dim], contiguous
  int batch;
  int heads;
  int seqlen_q;
  int seqlen_k;
  int head_dim;
  int causal;           // 1: query i attends keys j <= i (top-left aligned, as torch SDPA)
  float softmax_scale;  // usually 1/sqrt(head_dim)
  LabDtype dtype;
};

#define LAB_EXPORT extern "C"

// Return the launch error of the kernel just launched as a message, or nullptr.
static inline const char* lab_last_launch_error() {
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

static inline __host__ __device__ int lab_cdiv(int a, int b) { return (a + b - 1) / b; }

// Raise a kernel's dynamic shared-memory limit when it needs more than the 48 KB default.
template <typename Kernel>
static inline cudaError_t lab_set_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}
