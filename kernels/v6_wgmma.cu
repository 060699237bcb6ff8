// v6_wgmma: FlashAttention forward on Hopper's own instructions (wgmma + TMA, warp-specialised),
// fp16 and bf16 in, fp32 accumulate. sm_90a only (compute capability 9.0; refused elsewhere).
//
// What changed since v5: both matrix products leave mma.sync (HMMA m16n8k16, one warp, operands
//   through ldmatrix into registers) for warpgroup MMAs (wgmma m64nNk16, HGMMA in SASS: 128 threads,
//   B -- and for S = Q K^T also A -- read by the tensor cores straight from shared memory). Tiles
//   arrive by TMA (cp.async.bulk.tensor: one thread, one instruction per 64-column box, completion
//   counted in bytes on an mbarrier, rows past the sequence zero-filled) in the 128-byte-swizzled
//   layout wgmma's descriptors read, into a two-stage ring of K and V tiles with full/empty
//   mbarriers. The CTA is warp-specialised: a producer warpgroup (setmaxnreg 24) issues the copies,
//   1-3 consumer warpgroups (setmaxnreg 232/240/160) own 64 query rows each. In a consumer, tile j's
//   S = Q K_j^T and tile j-1's O += P V are issued together and the softmax of S_j runs while P V
//   is still on the tensor cores (FlashAttention-3's intra-warpgroup overlap); P goes from the S
//   accumulator to wgmma's register A operand without touching shared memory. Causal blocks run
//   longest-first (as v5).
// Bottleneck it attacks: v5's tensor path. Its stored report (profiles/examples/*-v5-*, H200,
//   B8 H16 N1024 D64): tensor pipe 49.6% active, HMMA issue 16.5% of peak, top stall `wait` (the
//   fixed-latency chain ldmatrix -> mma.sync -> softmax), 227 registers and 1 warp per scheduler;
//   on the FlashAttention grid v5 runs at 30-35% of the dense FP16 peak (~990 TFLOP/s) while cuDNN's
//   wgmma kernel reaches 45-65%.
// Predicted gain (written before measuring): 1.3-1.6x over v5 on the FlashAttention grid:
//   450-550 TFLOP/s at D=128, 380-450 at D=64, about SDPA cuDNN's level.
// Measured (NVIDIA H200, 2026-11-23, commit 6e391e6; `lab sweep --variant v5,v6 --preset fa-grid
//   --mode fwd --baselines sdpa-cudnn,sdpa-flash`, profiles/examples/*-sweep-fa-grid-v6, exported into
//   benchmarks/RESULTS.md; fp16, B = 16384/N, H = 2048/D, N = 1024..16384): D=128 498-664 TFLOP/s
//   (50-67% of the dense FP16 peak), 0.91-1.02x SDPA cuDNN non-causal, 0.85-0.99x causal, 1.24-1.89x
//   v5; D=64 264-486 TFLOP/s (27-49%), 0.96-1.08x cuDNN non-causal, 0.84-0.96x causal, 1.10-1.49x v5;
//   1.29-1.97x SDPA's FA2. >= 1.0x cuDNN in 4 of 20 cells (non-causal N >= 8192), >= 1.3x v5 in 13.
//   Short of cuDNN at N <= 2048 (per-CTA prologue and epilogue not hidden: no persistent scheduler)
//   and on causal D=64 (its softmax as long as its products). lab profile (B8 H16 N1024 D64): 1.25x v5.
//   Prediction held at D=128 (above it) and at D=64 for N >= 2048; missed at N = 1024.
// Why raw PTX (hopper/*.cuh) and not CuTe: the ladder's rungs are read as one file each, and the
//   wrappers are ~20 short asm blocks whose operands a reader can check against the PTX ISA tables;
//   CuTe would add the CUTLASS headers to the build and hide the layouts this rung is about.
// Profile it: lab profile --variant v6 --dtype float16 --shape 4,16,4096,128
//
// Warpgroup roles in one CTA (D=128: 1 producer + 2 consumers, BM = 128 query rows, BN = 128 keys):
//
//   warpgroup 0: producer (setmaxnreg.dec 24; one elected thread)
//     Q --TMA--> smem Q [BM x D]                        (once; mbarrier q_full)
//     for j: wait k_empty[j%2] -> TMA K_j -> smem K[j%2] (k_full[j%2], expect_tx bytes)
//            wait v_empty[j%2] -> TMA V_j -> smem V[j%2] (v_full[j%2])
//           |                                   ^
//           v full (tx bytes)                   | empty (every consumer thread arrives)
//   warpgroups 1, 2: consumers (setmaxnreg.inc 240), rows m0 + 64*(wg-1) .. +63
//     S_0 = Q K_0^T; softmax; P_0
//     for j = 1 ..:  +-- wgmma S_j = Q K_j^T  (smem x smem, m64n128k16 x D/16)  --+ in flight
//                    +-- wgmma O += P_{j-1} V_{j-1} (regs x smem^T, m64nDk16 x 8) -+ together
//                    wait S_j -> release K slot -> mask, row max, exp2, row sum (under P V)
//                    wait P V -> release V slot -> O *= alpha, P_j = pack(S_j)
//     O += P_last V_last; O /= l; store
//
//   D=64: one consumer warpgroup per CTA (BM = 64, 232 registers) and two CTAs per SM, or, for
//   non-causal problems with seqlen_k >= 8192, three consumers (BM = 192) sharing each K/V tile.
//
//   Shared memory (1024-byte aligned): [Q: D/64 boxes of BM x 128 B][K stage 0, 1][V stage 0, 1],
//   each tile D/64 boxes of 64 columns x rows, 128-byte swizzle (16-byte chunk c of row r stored at
//   chunk c ^ (r % 8)). wgmma descriptors: Q, K K-major (8-row groups 1024 B apart, a k16 step is
//   +32 B inside the atom); V MN-major (64-column atoms BN*128 B apart, a k16 step is +2048 B).
#include "common.cuh"
#include "hopper/fwd_wgmma.cuh"  // the kernel and its launch (moved there unchanged for v8 to reuse)

namespace v6 {

// The kernel's tile configuration (hopper/fwd_wgmma.cuh documents its parameters).
template <int D_, int BN_, int STAGES_, bool PINGPONG_ = false, int CONSUMERS_ = 2>
using Config = lab_hopper_fwd::Config<D_, BN_, STAGES_, PINGPONG_, CONSUMERS_>;
using lab_hopper_fwd::launch;
// The configurations the launcher uses (picked by measurement, benchmarks/v6_notes.md run 5):
//                       D   BN  stages ping-pong consumer warpgroups
using Default64 = Config<64, 128, 2, false, 1>;     // BM = 64, two CTAs per SM
using Long64 = Config<64, 128, 2, false, 3>;        // BM = 192: non-causal, seqlen_k >= kLongKeys
using Default128 = Config<128, 128, 2, false, 2>;   // BM = 128, one CTA per SM
// At D=64 with many key tiles per CTA, three consumer warpgroups share each K/V tile (a third of
// the L2 -> shared traffic per query row); with few, two small CTAs per SM hide each other's
// prologue and epilogue.
constexpr int kLongKeys = 8192;

#ifdef LAB_TUNING
// Candidate configurations for `lab tune --variant v6` (the tuning contract of common.cuh), fp16 and
// bf16; the launcher's own choice is timed beside them as "default". Label: C consumer warpgroups
// (BM = 64 C query rows), BN keys per tile, S stages of the K/V ring, pp = ping-pong. The three-consumer
// tile is compiled non-causal only, and says so (LAB_SERVES_NON_CAUSAL: `lab tune` on a causal problem
// shows it not applicable); its launcher refuses a causal problem all the same.
template <class C>
const char* launch_any(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? launch<C, true>(a, stream) : launch<C, false>(a, stream);
}
template <class C>
const char* launch_non_causal(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? "candidate is for non-causal problems only" : launch<C, false>(a, stream);
}
static const LabTuneCandidate kCandidates64[] = {
    {"C1 BN128 S2 (2 CTAs/SM)", launch_any<Config<64, 128, 2, false, 1>>},
    {"C1 BN128 S3 (2 CTAs/SM)", launch_any<Config<64, 128, 3, false, 1>>},
    {"C1 BN64 S2 (2 CTAs/SM)", launch_any<Config<64, 64, 2, false, 1>>},
    {"C2 BN128 S2", launch_any<Config<64, 128, 2, false, 2>>},
    {"C2 BN128 S2 pp", launch_any<Config<64, 128, 2, true, 2>>},
    {"C3 BN128 S2 (non-causal)", launch_non_causal<Config<64, 128, 2, false, 3>>, LAB_SERVES_NON_CAUSAL},
};
static const LabTuneCandidate kCandidates128[] = {
    {"C2 BN128 S2", launch_any<Config<128, 128, 2, false, 2>>},
    {"C2 BN128 S2 pp", launch_any<Config<128, 128, 2, true, 2>>},
    {"C2 BN64 S3", launch_any<Config<128, 64, 3, false, 2>>},
    {"C1 BN64 S2 (2 CTAs/SM)", launch_any<Config<128, 64, 2, false, 1>>},
};
static LabTuneList candidates(int head_dim) {
  switch (head_dim) {
    case 64: return lab_tune_list(kCandidates64);
    case 128: return lab_tune_list(kCandidates128);
    default: return {nullptr, 0};
  }
}
#endif

}  // namespace v6

static const char* refuse(const LabAttentionArgs* args) {
  if (args->head_dim != 64 && args->head_dim != 128) return "v6 supports head_dim 64 and 128";
  if (args->seqlen_q < 1 || args->seqlen_k < 1) return "v6 needs seqlen_q >= 1 and seqlen_k >= 1";
  // The row max is taken on raw scores and scaled afterwards, which needs a positive scale.
  if (!(args->softmax_scale > 0.f)) return "v6 needs softmax_scale > 0";
  const void* ptrs[4] = {args->q, args->k, args->v, args->o};
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "v6 needs q, k, v and o 16-byte aligned (TMA)";
  if (lab_hopper_refusal() != nullptr) return "v6 needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma + TMA); this GPU is not one";
  if (!lab_tma_encode_tiled()) return "v6: the driver has no cuTensorMapEncodeTiled (needs CUDA 12+ driver)";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v6(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args)) return why;
  if (args->head_dim == 64) {
    if (args->causal) return v6::launch<v6::Default64, true>(args, stream);
    return args->seqlen_k >= v6::kLongKeys ? v6::launch<v6::Long64, false>(args, stream)
                                           : v6::launch<v6::Default64, false>(args, stream);
  }
  return args->causal ? v6::launch<v6::Default128, true>(args, stream) : v6::launch<v6::Default128, false>(args, stream);
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v6_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(v6::candidates(head_dim));
}
LAB_EXPORT const char* lab_forward_v6_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args)) return why;
  return lab_tune_launch(v6::candidates(args->head_dim), args, stream, config);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v6"
// slug = "wgmma"
// title = "Hopper: wgmma + TMA, a producer warpgroup feeding consumer warpgroups (sm_90a)"
// dtypes = ["float16", "bfloat16"]
// head_dims = [64, 128]
// min_cc = "9.0"             # wgmma, TMA, setmaxnreg: Hopper only
// arch_flags = ["-gencode=arch=compute_90a,code=sm_90a"]
// attacks = ["compute-bound"]  # v5's tensor path: mma.sync issue and its ldmatrix -> HMMA -> softmax chain
// grid = "q-tiles,bh"        # non-causal: batch*heads on grid.y (<= 65535, refused above)
// aligned16 = true           # TMA: the launcher refuses q, k, v, o not 16-byte aligned
// gqa = true                 # K/V heads dividing Q's: hopper/fwd_wgmma.cuh's GQA instantiation reads K/V row bh / (H/Hkv)
// lab:end
