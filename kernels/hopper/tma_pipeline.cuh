// Flash Lab, Hopper machinery (sm_90a): the TMA pipeline. mbarriers that count arrivals and
// transaction bytes, TMA copies (tensor boxes and plain bulk copies) that complete on them, the
// host-side tensor maps those copies read, and the warp-specialisation primitives (setmaxnreg,
// named barriers) a producer/consumer CTA is built from. Pure PTX wrappers, no state; names follow
// the PTX ISA sections they wrap. Moved out of common.cuh unchanged (v6_wgmma proved them), with
// the bulk copy (v8_wgmma_bwd's row statistics) and bulk reduction (its dQ) added, and the TMA
// tensor reduction with its fp32 map (v8's TMA-dQ candidates).
//
// Device code here runs only on sm_90a: a rung that uses it guards its kernel body with
// __CUDA_ARCH_FEAT_SM90_ALL and refuses other devices in its launcher.
#pragma once

#include "../common.cuh"

#if defined(__CUDACC__)
#include <cuda.h>           // CUtensorMap (the TMA descriptor a kernel takes as a __grid_constant__ parameter)
#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled (the driver entry point, fetched at run time)
#include <type_traits>

// mbarrier: a 64-bit shared-memory barrier that counts arrivals and, for TMA, transaction bytes.
static __device__ __forceinline__ void lab_mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
// Make the initialised barriers visible to the async proxy (TMA) before any copy uses them.
static __device__ __forceinline__ void lab_fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` the copy engine will deliver to this phase.
static __device__ __forceinline__ void lab_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void lab_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spin until the phase with this parity has completed (a fresh barrier counts parity 1 as done,
// which lets a producer pass its first wait on an empty slot).
static __device__ __forceinline__ void lab_mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "LAB_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LAB_MBAR_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// TMA: one box of a 3-D tensor map (coordinates innermost first) -> shared memory, completing on
// `bar` with the box's bytes. Out-of-range elements arrive as zeros.
static __device__ __forceinline__ void lab_tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                       int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
static __device__ __forceinline__ void lab_tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// setmaxnreg: move registers between warpgroups (every warp of a warpgroup runs the same one).
template <int kRegs>
static __device__ __forceinline__ void lab_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
static __device__ __forceinline__ void lab_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barrier among `threads` threads (a multiple of 32): barrier 0 is __syncthreads'.
static __device__ __forceinline__ void lab_named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
static __device__ __forceinline__ void lab_named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A plain (non-tensor) bulk copy global -> shared of `bytes` (a multiple of 16, both addresses
// 16-byte aligned), completing on `bar` like a tensor box: one thread moves a contiguous row
// statistic without a tensor map.
static __device__ __forceinline__ void lab_bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// A bulk reduction shared -> global: `bytes` (a multiple of 16, both addresses 16-byte aligned) of
// fp32 added element-wise into global memory by the copy engine (the adds happen at L2, like RED),
// tracked by this thread's bulk-async groups: commit, then wait before the source is overwritten.
static __device__ __forceinline__ void lab_bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void lab_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most kPending of this thread's bulk groups are still reading their shared source.
template <int kPending>
static __device__ __forceinline__ void lab_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Wait until at most kPending of this thread's bulk groups are incomplete (their writes done).
template <int kPending>
static __device__ __forceinline__ void lab_bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Ordering bulk reductions across CTAs (v8's deterministic dQ): a turn counter in global memory,
// read with acquire and advanced with release at GPU scope, and the proxy fence between the generic
// accesses to it and the async proxy's reductions on either side.
static __device__ __forceinline__ int lab_ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void lab_red_release_gpu_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ void lab_fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// A TMA tensor reduction shared -> global: the box of a 3-D tensor map (coordinates innermost first)
// at those coordinates, read from shared memory in the map's layout (its swizzle), added element-wise
// into global memory by the copy engine (fp32 add at L2, as RED and the bulk reduction do); elements
// of the box outside the tensor are not written. Tracked by this thread's bulk-async groups like
// lab_bulk_reduce_add_f32: commit, then wait (.read) before the source is overwritten.
static __device__ __forceinline__ void lab_tma_reduce_add_3d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                                             int c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
      ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// A TMA tensor store shared -> global: the box of a 3-D tensor map at those coordinates (innermost
// first), read from shared memory in the map's layout (its swizzle); elements of the box outside the
// tensor are not written. A bulk-async group like the reduction above: commit, then wait (.read)
// before the source is overwritten; the writing threads fence.proxy.async their stores first.
static __device__ __forceinline__ void lab_tma_store_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
static __device__ __forceinline__ void lab_st_shared_b32(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Host side: tensor maps.
// ---------------------------------------------------------------------------------------------

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no -lcuda needed);
// nullptr where the driver has none (the launcher refuses).
static inline PFN_cuTensorMapEncodeTiled_v12000 lab_tma_encode_tiled() {
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

// A [bh, n, d] 16-bit tensor as a 3-D map read in boxes of [rows, 64 columns] with the 128-byte
// swizzle wgmma's descriptors expect. The middle dimension is n itself, so a box running past a
// head's last row is zero-filled instead of reading the next head.
template <typename T>
static inline bool lab_tma_map_3d(CUtensorMap* map, const void* ptr, int d, int n, int bh, int box_rows) {
  const CUtensorMapDataType type =
      std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t dims[3] = {(cuuint64_t)d, (cuuint64_t)n, (cuuint64_t)bh};
  const cuuint64_t strides[2] = {(cuuint64_t)d * 2, (cuuint64_t)n * d * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return lab_tma_encode_tiled()(map, type, 3, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A [bh, n, d] fp32 tensor (an accumulator: v8's dQ) as a 3-D map in boxes of [rows, 32 columns]
// (128 bytes, the widest box the 128-byte swizzle allows), so that the shared-memory tile a
// reduction reads is swizzled: a warp's float2 stores of mma fragments (8 rows, 32 bytes each) then
// meet each bank twice, not eight times as in a plain row-major tile with 512-byte rows. The middle
// dimension is n itself: box rows past a head's last row are not written.
static inline bool lab_tma_map_3d_f32(CUtensorMap* map, void* ptr, int d, int n, int bh, int box_rows) {
  const cuuint64_t dims[3] = {(cuuint64_t)d, (cuuint64_t)n, (cuuint64_t)bh};
  const cuuint64_t strides[2] = {(cuuint64_t)d * 4, (cuuint64_t)n * d * 4};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {32, (cuuint32_t)box_rows, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return lab_tma_encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, ptr, dims, strides, box, elem_strides,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Hopper only: wgmma, TMA and setmaxnreg exist on compute capability 9.0 (sm_90a) and nowhere
// else. nullptr on a Hopper GPU, else why not (the rung's launcher returns it).
static inline const char* lab_hopper_refusal() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "no CUDA device";
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0)
    return "needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma + TMA); this GPU is not one";
  return nullptr;
}
#endif  // __CUDACC__
