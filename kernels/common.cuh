// Flash Lab: what every rung shares. CUDA only, no torch headers.
//
// The launcher contract. Every rung file kernels/<id>_<slug>.cu exports exactly one C function,
//
//     extern "C" const char* lab_forward_<id>(const LabAttentionArgs* args, cudaStream_t stream);
//
// which launches the rung on `stream` and returns nullptr on success, or a static message saying
// why not (an unsupported head_dim or dtype, or the CUDA error of the launch). kernels/binding.cpp
// wraps it for PyTorch; the build compiles binding.cpp with -DLAB_LAUNCHER=lab_forward_<id>.
//
// The tuning contract (optional; `lab tune --variant <id>`). Built with -DLAB_TUNING, a rung may
// also export its candidate configurations, which live only in its own file:
//
//     extern "C" const char* lab_forward_<id>_configs(int head_dim, LabDtype dtype);
//         // the candidates' labels for that head_dim and dtype, ';'-separated ("" when none); a label
//         // may end in "|causal" or "|non-causal": the candidate serves only problems of that mask
//     extern "C" const char* lab_forward_<id>_config(const LabAttentionArgs* args, cudaStream_t stream,
//                                                    int config);
//         // launch candidate `config` (an index into that list), same return convention as above
//
// The lab builds, checks and times every candidate through the same extension; nothing outside
// the rung's file names them. A candidate compiled for one mask only (v6's three-consumer tile is
// built non-causal) declares it in its table (LabTuneCandidate::serves below; lab_tune_labels writes
// the mark): the lab then shows it "not applicable" on a problem of the other mask, with that reason,
// and never launches it there; it is checked on seeded shapes of its own mask only, so a wrong
// output is still a failure and a refusal is never mistaken for one. Its launcher still refuses the
// other mask (a refusal is an error, as for any launcher): the declaration is what the lab reads.
//
// The backward contract (optional; a rung whose lab:rung block says `backward = true`). Training
// needs the forward's row statistic and three more functions:
//
//   * Its forward writes the row log-sum-exp when args->lse is not null: lse[b, h, i] =
//     log(sum_j exp(softmax_scale * q_i . k_j)) over the keys row i attends (natural log, fp32,
//     [batch, heads, seqlen_q], contiguous), as torch's flash backend returns it. A forward-only rung
//     may write it too (`writes_lse = true`); every other rung's forward gets args->lse = nullptr.
//   * It exports
//
//     extern "C" size_t lab_backward_<id>_workspace(const LabBackwardArgs* args);
//         // bytes of scratch the backward needs for this problem (0 for none)
//     extern "C" const char* lab_backward_<id>(const LabBackwardArgs* args, cudaStream_t stream);
//         // dQ, dK, dV from Q, K, V, O, dO and the forward's LSE; same return convention as forward
//
// Who owns what: the LAB owns the memory of every tensor, scratch included. It allocates
// args->workspace (workspace_bytes of it, 256-byte aligned, uninitialised, from torch's
// stream-ordered allocator so peak memory counts it) before each call. The RUNG owns the
// workspace's layout and contents: typically the fp32 dQ accumulator and the row statistic
// D = rowsum(dO * O), which its own kernels initialise (a preprocess kernel computes D and zeroes
// the accumulator) on `stream`. dq, dk and dv are written whole, never accumulated into: the lab
// poisons them with NaN before a check. Every launch of a backward goes on `stream`.
//
// The GQA contract (optional; a rung whose lab:rung block says `gqa = true`). K and V (and dK, dV)
// may have fewer heads than Q: args->heads_kv of them, heads_kv dividing heads, and query head h
// reads K/V head h / (heads / heads_kv) (grouped-query attention; heads_kv = 1 is multi-query).
// dK and dV of a K/V head are the sums over its group of query heads. Every other tensor keeps
// `heads` (Q, O, dO, dQ, the LSE). The lab sends a GQA problem only to a rung that declares it
// (a rung without `gqa = true` is refused before anything is built, and its binding, compiled
// without -DLAB_GQA, refuses K/V heads != Q heads); heads_kv equals heads in every other call, so a
// rung that never reads it is unchanged. The field sits last in both argument structs.
//
// The deterministic contract (optional; a rung whose lab:rung block says `deterministic = true`,
// which needs `backward = true`). With args->deterministic = 1 the backward must give the same bits
// of dQ, dK and dV on every run of the same inputs (the same GPU and binary): no sum whose order
// depends on scheduling (atomics into an accumulator, reductions that land in arrival order).
// FlashAttention-3's `deterministic` argument and torch.use_deterministic_algorithms ask the same.
// The lab sets it only for a rung that declares the capability (`--deterministic`; every other
// rung is refused before anything runs, and its binding, compiled without -DLAB_DETERMINISTIC,
// refuses the flag); it is 0 in every other call, so a rung that never reads it is unchanged.
// `lab check --deterministic` runs the backward twice on the same inputs and requires dQ, dK and dV
// bitwise equal, besides the float64 check. The field sits last in LabBackwardArgs.
//
// The forward workspace contract (optional; any cuda rung). A forward that needs scratch exports
//
//     extern "C" size_t lab_forward_<id>_workspace(const LabAttentionArgs* args);
//         // bytes of scratch this problem's forward needs (0 for none)
//
// and the lab gives it args->workspace as it gives the backward its own: workspace_bytes of it,
// 256-byte aligned, uninitialised, from torch's stream-ordered allocator, before each call (the
// tuning candidates' calls too, so the function covers every candidate). The rung owns its layout
// and initialises it on `stream`: v9's dynamic tile scheduler zeroes its tile counter there, as
// FlashAttention-3 and cuDNN zero theirs. Scratch that lives across calls would be shared by calls
// on other streams and by every replay of a captured graph; scratch per call is not. A rung that
// exports no such function gets args->workspace = nullptr and workspace_bytes = 0 (the binding's
// reference to it is weak), and pays nothing: the lab allocates only when the function asks.
//
// The zeroed counters contract (a cuda rung that exports lab_forward_<id>_workspace; every other gets nullptr).
// args->counters is kLabCounterBytes of device memory the lab keeps for each device and stream: zero when the launch
// starts, and the rung must leave it zero when its launch ends (the last CTA of v9's dynamic walk resets its tile counter). So a counter costs no memset a call, and no
// two launches that might overlap share it: calls on one stream run in order, each stream has its own. A call captured
// into a CUDA graph gets a set of its own, never handed out again, from a slab the lab zeroed outside any capture: the
// replays of one executable graph run one at a time (cudaGraphLaunch orders each behind the last), so they share it
// in order. (One graph instantiated twice and the two launched at once would share it too: the lab's graphs, and
// torch's, are instantiated once.) Where the slab is spent, or not yet made (no call outside a capture on the device),
// it is nullptr: a rung then uses its forward workspace and initialises it, as above.
//
// Tuning a backward (`lab tune --mode bwd`, optional): built with -DLAB_TUNING a rung may also
// export lab_backward_<id>_configs(int head_dim, LabDtype dtype) and
// lab_backward_<id>_config(const LabBackwardArgs*, cudaStream_t, int config), as for the forward;
// lab_backward_<id>_workspace covers every candidate.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

enum LabDtype : int { LAB_FLOAT32 = 0, LAB_FLOAT16 = 1, LAB_BFLOAT16 = 2 };

// The zeroed counters contract (above): the bytes of args->counters.
constexpr size_t kLabCounterBytes = 256;

struct LabAttentionArgs {
  const void* q;  // [batch, heads, seqlen_q, head_dim], contiguous
  const void* k;  // [batch, heads_kv, seqlen_k, head_dim], contiguous
  const void* v;  // [batch, heads_kv, seqlen_k, head_dim], contiguous
  void* o;        // [batch, heads, seqlen_q, head_dim], contiguous
  int batch;
  int heads;
  int seqlen_q;
  int seqlen_k;
  int head_dim;
  int causal;           // 1: query i attends keys j <= i (top-left aligned, as torch SDPA)
  float softmax_scale;  // usually 1/sqrt(head_dim)
  LabDtype dtype;
  float* lse;           // [batch, heads, seqlen_q] fp32 row log-sum-exp to write, or nullptr (backward contract)
  int heads_kv;         // K and V heads: = heads, or (gqa = true) a divisor of it (the GQA contract)
  void* workspace;        // the forward workspace contract: workspace_bytes of scratch, or nullptr
  size_t workspace_bytes;
  void* counters;         // the zeroed counters contract: kLabCounterBytes, zero at the launch, left zero; or nullptr
};

// The backward's arguments (the backward contract above). Every tensor is contiguous (B, H, N, D)
// in the inputs' dtype unless its comment says otherwise.
struct LabBackwardArgs {
  const void* q;      // [batch, heads, seqlen_q, head_dim]
  const void* k;      // [batch, heads_kv, seqlen_k, head_dim]
  const void* v;      // [batch, heads_kv, seqlen_k, head_dim]
  const void* o;      // [batch, heads, seqlen_q, head_dim]: the forward's output
  const void* dout;   // [batch, heads, seqlen_q, head_dim]: dL/dO
  const float* lse;   // [batch, heads, seqlen_q] fp32: the forward's row log-sum-exp
  void* dq;           // [batch, heads, seqlen_q, head_dim]: written whole
  void* dk;           // [batch, heads_kv, seqlen_k, head_dim]: written whole (GQA: summed over the group)
  void* dv;           // [batch, heads_kv, seqlen_k, head_dim]: written whole (GQA: summed over the group)
  void* workspace;    // workspace_bytes of uninitialised scratch, 256-byte aligned (the rung's layout)
  size_t workspace_bytes;
  int batch;
  int heads;
  int seqlen_q;
  int seqlen_k;
  int head_dim;
  int causal;
  float softmax_scale;
  LabDtype dtype;
  int heads_kv;       // K, V, dK and dV heads: = heads, or (gqa = true) a divisor of it
  int deterministic;  // 1: dQ, dK, dV bitwise identical run to run (deterministic = true; else always 0)
};

#define LAB_EXPORT extern "C"

// Return the launch error of the kernel just launched as a message, or nullptr.
static inline const char* lab_last_launch_error() {
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

static inline __host__ __device__ int lab_cdiv(int a, int b) { return (a + b - 1) / b; }

#ifdef LAB_TUNING
#include <string>
// Which problems a tuning candidate serves (the tuning contract above): both masks, unless declared.
enum LabServes : int { LAB_SERVES_ALL = 0, LAB_SERVES_CAUSAL = 1, LAB_SERVES_NON_CAUSAL = 2 };
// A rung's tuning candidates: a label, the launcher of one compiled configuration, and the problems
// it serves (left out of an entry: LAB_SERVES_ALL).
struct LabTuneCandidate {
  const char* label;
  const char* (*launch)(const LabAttentionArgs* args, cudaStream_t stream);
  LabServes serves;
};
struct LabTuneList {
  const LabTuneCandidate* items;
  int count;
};
template <int N>
static inline LabTuneList lab_tune_list(const LabTuneCandidate (&items)[N]) { return {items, N}; }
// The labels joined by ';', each with its mask where it serves one (valid until the next call on this
// thread; the binding copies them).
static inline const char* lab_tune_labels(LabTuneList list) {
  static thread_local std::string joined;
  joined.clear();
  for (int i = 0; i < list.count; ++i) {
    if (i) joined += ';';
    joined += list.items[i].label;
    if (list.items[i].serves == LAB_SERVES_CAUSAL) joined += "|causal";
    if (list.items[i].serves == LAB_SERVES_NON_CAUSAL) joined += "|non-causal";
  }
  return joined.c_str();
}
static inline const char* lab_tune_launch(LabTuneList list, const LabAttentionArgs* args, cudaStream_t stream,
                                          int config) {
  if (config < 0 || config >= list.count) return "tuning candidate index out of range for this head_dim and dtype";
  return list.items[config].launch(args, stream);
}
#endif

// Raise a kernel's dynamic shared-memory limit when it needs more than the 48 KB default.
template <typename Kernel>
static inline cudaError_t lab_set_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

// ---------------------------------------------------------------------------------------------
// Tensor-core helpers (added for v5_mma; pure PTX wrappers, no state). Device-only: binding.cpp
// includes this header through the host compiler, so the block is hidden from it.
// Fragment layouts follow the PTX ISA's "Matrix fragments for mma.m16n8k16" tables.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Shared-memory address as the 32-bit value ldmatrix and cp.async take.
static __device__ __forceinline__ uint32_t lab_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1 (.cg). src_bytes < 16 zero-fills the rest, so
// src_bytes = 0 writes 16 zero bytes: out-of-range rows become zeros without a branch.
static __device__ __forceinline__ void lab_cp_async_16(uint32_t smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}
// Same without the size operand: always 16 bytes (full tiles, no predicate or size register).
static __device__ __forceinline__ void lab_cp_async_16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
static __device__ __forceinline__ void lab_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
static __device__ __forceinline__ void lab_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it.
static __device__ __forceinline__ void lab_ldmatrix_x4(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem));
}
// Same, each matrix transposed on the way (row-major V tile -> column operand of P.V).
static __device__ __forceinline__ void lab_ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem));
}

// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulate. T is __half or __nv_bfloat16.
template <typename T>
static __device__ __forceinline__ void lab_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1);
template <>
__device__ __forceinline__ void lab_mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void lab_mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                                uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A * B with a zero accumulator (C = 0 costs no register moves: the first k-step of a product).
template <typename T>
static __device__ __forceinline__ void lab_mma_m16n8k16_zero_acc(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                                 uint32_t b1);
template <>
__device__ __forceinline__ void lab_mma_m16n8k16_zero_acc<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                                  uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%10,%10,%10,%10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}
template <>
__device__ __forceinline__ void lab_mma_m16n8k16_zero_acc<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                                         uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%10,%10,%10,%10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

// Two floats -> one register of two 16-bit values (lo in the low half), round to nearest.
template <typename T>
static __device__ __forceinline__ uint32_t lab_pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t lab_pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t lab_pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// 2^x on the SFU (MUFU.EX2), flushing denormals; ex2(-inf) = +0, which masked scores rely on.
static __device__ __forceinline__ float lab_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif  // __CUDACC__ (end of the v5_mma helper block)

// ---------------------------------------------------------------------------------------------
// Hopper (sm_90a) machinery lives in headers by role beside this one, as FlashAttention-3's hopper/
// keeps its pipeline and MMA helpers apart: hopper/tma_pipeline.cuh (mbarriers, TMA copies and
// tensor maps, warp specialisation) and hopper/wgmma.cuh (descriptors and warpgroup MMAs).
// ---------------------------------------------------------------------------------------------
