// Flash Lab: the backward's preprocess and convert kernels and its workspace layout, shared by the
// backward rungs (moved here from v7_mma_bwd.cu unchanged; v8_wgmma_bwd uses them as they are).
// FlashAttention's three launches: (a) preprocess, (b) the rung's own main loop, (c) convert.
// Plain CUDA (sm_80+), no Hopper instructions.
#pragma once

#include "common.cuh"

#include <cmath>
#include <type_traits>

namespace lab_bwd {

// The workspace (common.cuh's backward contract: the lab allocates it, the rung lays it out):
//   [dQ accumulator: fp32 B*H*nq_pad*D][LSE * log2(e): fp32 B*H*nq_pad][D: fp32 B*H*nq_pad]
// nq_pad rounds nq up to the largest query block any candidate uses, so the main loop copies
// whole blocks of the two row statistics with no bounds check; padding rows hold LSE = +inf
// (P = 2^-inf = 0: a padded query row contributes nothing) and D = 0.
constexpr int kMaxQueryBlock = 128;
struct Workspace {
  float* dq_acc;
  float* lse2;
  float* dsum;
  int nq_pad;
};
static inline size_t align256(size_t n) { return (n + 255) & ~size_t(255); }
// One int per 64 query rows of each head after the dQ accumulator: v8's deterministic candidates'
// turn counters (which key block adds into the query block next).
static inline size_t turn_bytes(const LabBackwardArgs* a) {
  return (size_t)a->batch * a->heads * (lab_cdiv(a->seqlen_q, kMaxQueryBlock) * kMaxQueryBlock / 64) * sizeof(int);
}
static inline size_t workspace_bytes(const LabBackwardArgs* a, Workspace* w = nullptr) {
  const size_t bh = (size_t)a->batch * a->heads;
  const int nq_pad = lab_cdiv(a->seqlen_q, kMaxQueryBlock) * kMaxQueryBlock;
  // nq_pad rows a head: an accumulator laid out per whole query block (v8's FragDq<>) writes the
  // padding rows of the last block too; the row-major [B*H, nq, D] uses the first B*H*nq*D floats.
  const size_t dq_bytes = align256(bh * nq_pad * a->head_dim * sizeof(float) + turn_bytes(a));
  const size_t row_bytes = align256(bh * nq_pad * sizeof(float));
  if (w != nullptr) {
    uint8_t* base = static_cast<uint8_t*>(a->workspace);
    w->dq_acc = reinterpret_cast<float*>(base);
    w->lse2 = reinterpret_cast<float*>(base + dq_bytes);
    w->dsum = reinterpret_cast<float*>(base + dq_bytes + row_bytes);
    w->nq_pad = nq_pad;
  }
  return dq_bytes + 2 * row_bytes;
}

// (a) Preprocess: one group of D/8 threads per query row, 16 bytes of dO and O per thread.
// D_i = sum(dO_i * O_i) in fp32; lse2 = lse * log2(e) so the main loop's exponent is one FFMA;
// the dQ accumulator rows are zeroed here (the atomics of the main loop add into them). kWhole:
// zero all nq_pad rows' worth of the accumulator as one flat buffer (an accumulator laid out per
// whole query block, v8's FragDq<>, uses every float of it, padding included).
template <typename T, int D, bool kWhole = false>
__global__ void __launch_bounds__(256)
bwd_preprocess_kernel(const T* __restrict__ o, const T* __restrict__ dout, const float* __restrict__ lse,
                      float* __restrict__ lse2, float* __restrict__ dsum, float* __restrict__ dq_acc, int nq,
                      int nq_pad) {
  constexpr int kChunks = D / 8, kRows = 256 / kChunks;
  const size_t bh = blockIdx.y;
  const int row = blockIdx.x * kRows + threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  float acc = 0.f;
  if (row < nq) {
    const size_t off = (bh * nq + row) * D + c * 8;
    const uint4 ov = *reinterpret_cast<const uint4*>(o + off);
    const uint4 dv = *reinterpret_cast<const uint4*>(dout + off);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 of, df;
      if constexpr (std::is_same<T, __half>::value) {
        of = __half22float2(*reinterpret_cast<const __half2*>(&ow[i]));
        df = __half22float2(*reinterpret_cast<const __half2*>(&dw[i]));
      } else {
        of = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ow[i]));
        df = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dw[i]));
      }
      acc = fmaf(of.x, df.x, fmaf(of.y, df.y, acc));
    }
    if constexpr (!kWhole) {
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(dq_acc + off) = zero;
      *reinterpret_cast<float4*>(dq_acc + off + 4) = zero;
    }
  }
  if constexpr (kWhole) {
    if (row < nq_pad) {
      const size_t off = (bh * nq_pad + row) * D + c * 8;
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(dq_acc + off) = zero;
      *reinterpret_cast<float4*>(dq_acc + off + 4) = zero;
    }
  }
#pragma unroll
  for (int w = kChunks / 2; w >= 1; w >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w);
  if (c == 0 && row < nq_pad) {
    dsum[bh * nq_pad + row] = row < nq ? acc : 0.f;
    lse2[bh * nq_pad + row] = row < nq ? lse[bh * nq + row] * 1.4426950408889634f : INFINITY;
  }
}

// (c) Convert: dQ = scale * accumulator, 8 elements (two float4 in, one 16-byte store out) per step.
template <typename T>
__global__ void __launch_bounds__(256)
bwd_convert_kernel(const float* __restrict__ dq_acc, T* __restrict__ dq, size_t n8, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(dq_acc)[2 * i];
    const float4 b = reinterpret_cast<const float4*>(dq_acc)[2 * i + 1];
    uint4 out;
    out.x = lab_pack2<T>(a.x * scale, a.y * scale);
    out.y = lab_pack2<T>(a.z * scale, a.w * scale);
    out.z = lab_pack2<T>(b.x * scale, b.y * scale);
    out.w = lab_pack2<T>(b.z * scale, b.w * scale);
    reinterpret_cast<uint4*>(dq)[i] = out;
  }
}

// (d) GQA with the group split over several CTAs: dK (dV) of each K/V head = the sum of its
// `splits` fp32 partials [head * splits + s, nk, D], added in split order (the same bits on every
// run: no atomics), to 16 bits, 8 elements per step. blockIdx.y: 0 dK, 1 dV. per_head = nk * D
// (a multiple of 8: a step never straddles two heads).
template <typename T>
__global__ void __launch_bounds__(256)
bwd_sum_partials_kernel(const float* __restrict__ dk_part, const float* __restrict__ dv_part, T* __restrict__ dk,
                        T* __restrict__ dv, size_t per_head, int splits, size_t n8) {
  const float* part = blockIdx.y == 0 ? dk_part : dv_part;
  T* out = blockIdx.y == 0 ? dk : dv;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
    const size_t e = 8 * i, head = e / per_head;
    const float* src = part + head * splits * per_head + (e - head * per_head);
    float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
    for (int s = 1; s < splits; ++s) {
      const float4 a2 = reinterpret_cast<const float4*>(src + s * per_head)[0];
      const float4 b2 = reinterpret_cast<const float4*>(src + s * per_head)[1];
      a = make_float4(a.x + a2.x, a.y + a2.y, a.z + a2.z, a.w + a2.w);
      b = make_float4(b.x + b2.x, b.y + b2.y, b.z + b2.z, b.w + b2.w);
    }
    uint4 o;
    o.x = lab_pack2<T>(a.x, a.y);
    o.y = lab_pack2<T>(a.z, a.w);
    o.z = lab_pack2<T>(b.x, b.y);
    o.w = lab_pack2<T>(b.z, b.w);
    reinterpret_cast<uint4*>(out)[i] = o;
  }
}

// Two fp32 adds into global memory in one reduction (sm_90: red.global.add.v2.f32, half the
// L2 atomic transactions of two scalar ones); one scalar RED each before Hopper.
static __device__ __forceinline__ void red_add2(float* addr, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(addr), make_float2(a, b));
#else
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
#endif
}

}  // namespace lab_bwd
