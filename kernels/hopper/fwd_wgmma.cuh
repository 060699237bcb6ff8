// Flash Lab, Hopper machinery (sm_90a): the warp-specialised forward, moved here from v6_wgmma.cu
// (whose header is its record: the schedule, the shared-memory layout, the measurements) so that a
// later Hopper rung reuses it instead of forking it: v6 launches it as it always did; v8_wgmma_bwd
// launches it with WRITE_LSE, its epilogue then also storing the row log-sum-exp the backward needs
// (common.cuh's backward contract). WRITE_LSE = false compiles to v6's kernel exactly.
// The tile scheduler (hopper/tile_scheduler.cuh) is a template argument: OneTilePerCta, v6's grid
// and v6's machine code; Persistent, v9's: each CTA loops over tiles, the K/V ring's stage and
// phase carried across them, Q freed by the consumers (mbarrier q_empty) once their last S = Q K^T
// of a tile is done, so the producer loads the next tile's Q and K/V under the epilogue.
// Both roles of a persistent CTA move from tile to tile through one function (advance()), and every
// K/V stage goes back to the producer, the tile's last V included (its missing release hung v9's
// first GPU run on any CTA's second tile; tests/test_fwd_pipeline_model.py replays the protocol).
// GQA (common.cuh's GQA contract) is a template argument too: K and V have heads_kv heads, and the
// producer loads query head bh's K/V tiles from row bh / kv_group of the [B*Hkv, nk, D] maps (b*H + h
// over H/Hkv is b*Hkv + h/(H/Hkv)), one integer division per tile in the producer thread. GQA =
// false is the kernel as it was, instruction for instruction (a runtime division there moved the
// consumers' instruction schedule; registers and spills did not change).
#pragma once

#include "tile_scheduler.cuh"
#include "tma_pipeline.cuh"
#include "wgmma.cuh"

#include <cmath>
#include <type_traits>

namespace lab_hopper_fwd {

// One CTA: 128-thread producer warpgroup + kConsumers consumer warpgroups of 64 query rows each.
// BN keys per K/V tile, kStages-deep ring of K and V tiles. kPingPong: the consumer warpgroups
// take turns issuing their matrix products (named barriers), so one's softmax runs while the
// other's products occupy the tensor cores.
template <int D_, int BN_, int STAGES_, bool PINGPONG_ = false, int CONSUMERS_ = 2>
struct Config {
  static constexpr int D = D_, BN = BN_, kStages = STAGES_, kConsumers = CONSUMERS_;
  static constexpr bool kPingPong = PINGPONG_;
  static constexpr int BM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kHalves = D / 64;          // 64-column (128-byte) swizzle atoms across D
  static constexpr int kQBytes = BM * D * 2;
  static constexpr int kKVBytes = BN * D * 2;     // one K or V tile
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;
  static constexpr int kSmemBytes = kVOffset + kStages * kKVBytes + 1024;  // + alignment slack
  // Registers: the producer needs few; the consumers hold S, P and O. 24 + 2 x 240 per thread x 128
  // threads = 64,512 of the SM's 65,536.
  // One consumer warpgroup: two CTAs per SM (each CTA's 256 threads start with 128 registers;
  // the producer gives 104 of them to the consumer), so one CTA's prologue and epilogue run under
  // the other's main loop.
  static constexpr int kMinBlocks = kConsumers == 1 ? 2 : 1;
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : 24;
  static constexpr int kConsumerRegs = kConsumers == 1 ? 232 : kConsumers == 2 ? 240 : 160;
  // A persistent CTA's producer carries the tile walk (step, round, ring position, tile, its key-tile
  // count) across its loop: at 24 registers ptxas spilled it (nvcc 13.0: 8-60 bytes per kernel).
  // setmaxnreg only moves registers inside the CTA's launch allocation (kLaunchRegs per thread):
  // 32 + 224 (one consumer), 40 + 2 x 232 (two), 32 + 3 x 160 (three, as v6).
  static constexpr int kLaunchRegs = (65536 / kMinBlocks / kThreads) & ~7;
  static constexpr int kPersistentProducerRegs = kConsumers == 2 ? 40 : 32;
  static constexpr int kPersistentConsumerRegs = kConsumers == 1 ? 224 : kConsumers == 2 ? 232 : 160;
  static_assert(kPersistentProducerRegs + kConsumers * kPersistentConsumerRegs <= kLaunchRegs * (1 + kConsumers),
                "setmaxnreg: the warpgroups' registers exceed the CTA's launch allocation (the increase would wait forever)");
  static constexpr int kHeadGroup = 32;  // causal longest-first order walks heads in groups (as v5)
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  // 176: FlashAttention-3's key tile at D=128 non-causal (v9 step 13's candidate; S = Q K^T is m64n176, P V
  // takes 11 k-steps), which leaves shared memory for Q and two K/V stages only (208 KB: no O buffer, one Q).
  static_assert(BN == 64 || BN == 128 || (BN == 176 && D == 128), "key tile of 64 or 128 (176 at D = 128)");
  static_assert(!kPingPong || kConsumers == 2, "ping-pong alternates two consumer warpgroups");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};

// A wrapper's flag, read from any Config type: NAME<C>::value is C::MEMBER where a wrapper below declares
// it and false for every other Config (each wrapper adds one flag and leaves its base's types unchanged).
#define LAB_CONFIG_FLAG(NAME, MEMBER)                                   \
  template <class C, class = void>                                      \
  struct NAME : std::false_type {};                                     \
  template <class C>                                                    \
  struct NAME<C, std::void_t<decltype(C::MEMBER)>> : std::integral_constant<bool, C::MEMBER> {}

// O stored through shared memory by TMA (v9 step 4 (b), a tuning candidate): Base's configuration
// plus a BM x D buffer after the V ring. Each consumer warpgroup writes its 64 rows of O there (in
// the 128-byte swizzle of a [64 rows, 64 columns] box), one of its threads hands the boxes to the
// copy engine (cp.async.bulk.tensor store, rows past nq not written) and the warpgroup goes on to
// its next tile at once; that thread waits for the store to have read the buffer only before the
// warpgroup's next epilogue writes it again. A wrapper rather than a Config parameter, so that every
// Config type (and every kernel's mangled name and machine code) that existed stays as it was.
template <class Base>
struct OByTma : Base {
  static constexpr bool kOByTma = true;
  static constexpr int kOOffset = Base::kVOffset + Base::kStages * Base::kKVBytes;
  static constexpr int kOBoxBytes = 64 * 128;  // one [64 rows, 64 columns] box of 16-bit O
  static constexpr int kSmemBytes = Base::kSmemBytes + Base::BM * Base::D * 2;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};
LAB_CONFIG_FLAG(StoresOByTma, kOByTma);

// O stored by TMA through the tile's last V stage instead of a buffer of its own (v9 step 14, a tuning candidate):
// FlashAttention-3's way of keeping O by TMA beside its 176-key tile at D=128, where Q and two K/V stages fill
// 208 KB. The consumers keep the last V stage of each tile (no release after the last P V); once the other
// warpgroup's last P V has read it too (named barriers kBarVRead + cw: each warpgroup arrives on the other's, then
// syncs on its own), each writes its 64 rows of O into its part of the stage, its storer thread hands them to the
// copy engine and waits for the store to have read them, and every consumer thread then frees the stage (v_empty),
// the storer last. The producer's next load into that stage (the next tile's second V at two stages) waits on
// that release as on any other. tests/test_fwd_pipeline_model.py replays the protocol (and catches it without the
// barriers or with the stage freed first).
template <class Base>
struct OInLastV : Base {
  static constexpr bool kOByTma = true;
  static constexpr bool kOInLastV = true;
  static constexpr int kOBoxBytes = 64 * 128;
  static_assert(Base::BM * Base::D * 2 <= Base::kKVBytes, "O's BM x D must fit in one V stage");
  static_assert(Base::kKVBytes % 1024 == 0, "each V stage 1024-byte aligned (the 128-byte swizzle of O's boxes)");
  static_assert(Base::kConsumers == 1 || (Base::kConsumers == 2 && Base::kPingPong),
                "one consumer, or two in ping-pong (whose turns keep the V-read barriers' phases in step)");
};
LAB_CONFIG_FLAG(StagesOInLastV, kOInLastV);

// Each consumer warpgroup computes only the key tiles its own 64 rows see (v9 step 5, a tuning
// candidate): the CTA's producer still loads the key tiles of the whole BM-row block (the last row's
// count, key_tiles(m0, BM, ...)), but with three consumers (BM = 192) causal, warpgroup 0's rows see up
// to 128 keys fewer than warpgroup 2's, and a ragged last block has warpgroups whose rows are all past
// nq (N = 512 or 1024: 576 or 1,152 rows computed for 512 or 1,024; such a warpgroup computes key
// tile 0 only). A warpgroup hands the K/V stages it does not read back to the producer (waiting for
// each to be full first, so that its arrival counts in that use's phase, not an earlier one), and
// does no product or softmax for them: they are masked whole for its rows (keys past its last row,
// past nq or past nk). A wrapper, as OByTma, so that every existing Config type and kernel stays as
// it was. Not with ping-pong (each warpgroup takes n_tiles + 1 turns a tile there).
template <class Base>
struct OwnKeyTiles : Base {
  static constexpr bool kOwnKeyTiles = true;
  static_assert(!Base::kPingPong, "OwnKeyTiles: ping-pong's turns count every key tile of the block");
};
LAB_CONFIG_FLAG(ComputesOwnKeyTiles, kOwnKeyTiles);

// OwnKeyTiles with a warp-uniform key-tile count (v9 step 6 (a), a tuning candidate): the same
// protocol, the warpgroup index behind n_mine broadcast from lane 0 (__shfl_sync), so that ptxas
// knows it is the same in every thread of a warp. From the thread index itself, ptxas compiled
// OwnKeyTiles' key loop as a divergent loop (benchmarks/v9_notes.md, "Step 5 (b)'s own-tiles on
// Long64: the machine code"): its stage, parity and wgmma descriptor arithmetic on the vector
// pipes, 24 more R2UR a key tile, convergence barriers around its mbarrier waits, 618 instructions
// a key tile against Long64's 598; with the broadcast the loop is Long64's, instruction for
// instruction. A wrapper of its own, so that OwnKeyTiles' kernels (timed in step 5) stay as they were.
template <class Base>
struct OwnKeyTilesUniform : OwnKeyTiles<Base> {
  static constexpr bool kOwnKeyTilesUniform = true;
};
LAB_CONFIG_FLAG(ComputesOwnKeyTilesUniformly, kOwnKeyTilesUniform);

// Two Q buffers (v9 step 6 (b), a tuning candidate, persistent grid only): the producer loads tile
// t + 1's Q into the buffer tile t - 1 used, as soon as the consumers have freed it (their last
// S = Q K^T of tile t - 1), i.e. about a tile ahead, instead of after the last S of tile t; so a
// tile's first S waits for no Q load, and the producer, no longer held on q_empty at the tile's end,
// issues the next tile's first K and V as soon as their stages are free. Buffer b = tile & 1, its
// own Q-landed and Q-free mbarriers, phase (tile >> 1) & 1. The second buffer sits after Base's
// data (1024-aligned: every Base's Q, K/V ring and O buffer are multiples of 1024 bytes).
template <class Base>
struct TwoQBuffers : Base {
  static constexpr bool kTwoQ = true;
  static constexpr int kQ1Offset = Base::kSmemBytes - 1024;  // Base's data, less its alignment slack
  static constexpr int kSmemBytes = Base::kSmemBytes + Base::kQBytes;
  static_assert(kQ1Offset % 1024 == 0, "the second Q buffer starts on a 1024-byte boundary (128-byte swizzle)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};
LAB_CONFIG_FLAG(HasTwoQBuffers, kTwoQ);
// The next tile's S_0 under this tile's epilogue (v9 step 9, a tuning candidate, persistent grid, one
// consumer warpgroup without ping-pong). A consumer issues its tile's last P V and, at once, the next
// tile's first S = Q K^T (after waiting for that tile's Q and first K: with TwoQBuffers Q landed long
// before), then waits for the P V only (wgmma groups complete in order) and writes O while S_0 runs;
// the next tile starts at S_0's softmax. Without it, a tile's S_0 runs with nothing beside it in the
// warpgroup, once per query block: at N = 512 causal D = 64 a block has 2.5 key tiles on average. The
// persistent CTA's last tile issues a product on shared memory it already holds instead (its result
// unused) so that the code path, and the wgmma group count, are the same on every tile. The producer
// is unchanged: its loads never depended on when the consumers issue S_0. Measured (H200, thirteenth
// session): 0.97-1.00x the default causal, 0.95-0.98x non-causal; not taken (the other CTA on the SM
// already fills S_0's bubble; benchmarks/v9_notes.md, "Step 9 measured").
template <class Base>
struct NextS0UnderEpilogue : Base {
  static constexpr bool kNextS0Early = true;
  static_assert(!Base::kPingPong && Base::kConsumers == 1, "NextS0UnderEpilogue: one consumer warpgroup, no turns");
};
LAB_CONFIG_FLAG(IssuesNextS0Early, kNextS0Early);

// A warpgroup's last key tile at half width where its second half is masked whole for the warpgroup's
// 64 rows (v9 step 11, a tuning candidate; BN = 128): causal, the diagonal tile of every other 64-row
// block (BM = 64) or of warpgroup 0 of every block (ping-pong's BM = 128), 10% of the key-tile work at
// N = 512; or a ragged last key tile of at most 64 keys. There the softmax reads 64 columns (its mask,
// max, exp2 and sum) and P V takes BN / 32 k-steps instead of BN / 16; S = Q K^T stays the full m64nBN
// product. The tile runs the one key loop; a half tile's last key step is peeled off it, and the last
// P V is issued and waited for in a branch per width, so that every choice of width is made with no
// product in flight (step 7 (a) chose per key tile with products in flight, and an m64n64 S in this
// step's first version: either made ptxas serialize every wgmma, C7511).
// Step 11 (a), measured (H100, 2026-11-27): three copies of the whole key loop, one chosen per tile, ran
// 0.876x at 16,32,1024,64 causal: the two CTAs on an SM ran different copies at once and the instruction
// cache missed (stall "no instructions" 1.4% -> 15.9% of the samples; benchmarks/v9_notes.md, "Step 11").
template <class Base>
struct HalfLastKeyTile : Base {
  static constexpr bool kHalfLast = true;
  static_assert(Base::BN == 128, "HalfLastKeyTile: the half tile is the first 64 keys of a 128-key tile");
};
LAB_CONFIG_FLAG(ComputesHalfLastKeyTile, kHalfLast);

// The softmax's row max as a tree (v9 step 12 (a), a tuning candidate): each row's 32 scores in a thread
// (W / 4; W = BN = 128) reduced pairwise, 5 dependent FMNMX, where the loop's running max made a chain of
// 17 (nvcc 13.0 keeps fmaxf's order: the SASS of the D=64 causal default, "Step 12" in
// benchmarks/v9_notes.md); the two rows' trees, then their shuffles, side by side. The chain is the first
// thing a tile's softmax does after its S lands, and everything after it waits for the max.
template <class Base>
struct TreeRowMax : Base {
  static constexpr bool kTreeMax = true;
};
LAB_CONFIG_FLAG(ReducesRowMaxAsTree, kTreeMax);

// The mask as one compare an element (v9 step 12 (b), a tuning candidate): each of a thread's two rows
// keeps the keys below min(nk, row + 1) (causal; nk otherwise), taken once as an offset from the thread's
// first column, so that an element's test is its column's compile-time offset against that limit. The
// per-element form tests col >= nk and col > row and computes col: about 200 instructions a masked tile
// against 128 (the D=64 causal default's SASS).
template <class Base>
struct MasksByRowLimit : Base {
  static constexpr bool kRowLimitMask = true;
};
LAB_CONFIG_FLAG(MasksByRowLimits, kRowLimitMask);

// P's row sums by the tensor cores (v9 step 17; D = 64): P V is an m64n72 product whose columns 64-71 read a BN x 64
// tile of ones (kept after Base's data, written once per CTA), so those accumulator columns are the running row sums,
// rescaled with O by the same alpha; the softmax drops its FADD an element (64 a thread a key tile) and the epilogue
// its quad shuffles. The ones tile is the descriptor's second 64-column atom: its leading byte offset is the distance
// from the V stage to it. The sums are of the 16-bit P that P V multiplies (the softmax's fp32 sum before), so O is an
// exact average of the rounded weights; the LSE instantiation keeps the fp32 sum (fwd_body). Measured (H100): 1.013-
// 1.019x on three consumers (Long64), 0.94-0.98x on one warpgroup at BM = 64. Step 16 (a software exp2 on the FMA
// pipe; removed after it lost, 22ee708 has it) cost 3-11%: the issue slots are the D=64 softmax's limit. Apply it
// outside OByTma and TwoQBuffers, whose buffers are placed after their base's data (fwd_body asserts the ones tile is
// the last buffer).
template <class Base>
struct RowSumByMma : Base {
  static constexpr bool kRowSumByMma = true;
  static constexpr int kOnesOffset = Base::kSmemBytes - 1024;  // Base's data, less its alignment slack
  static constexpr int kSmemBytes = Base::kSmemBytes + Base::BN * 128;
  static_assert(Base::D == 64, "RowSumByMma: the ones are the second 64-column atom of P V's B operand (D = 64)");
  static_assert(kOnesOffset % 1024 == 0, "the ones tile starts on a 1024-byte boundary (128-byte swizzle)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};
LAB_CONFIG_FLAG(SumsRowsByMma, kRowSumByMma);
// A persistent walk's tile handed to the consumers as its coordinates (v9 steps 22 and 23): the producer thread writes
// the tile it loads (head << 32 | query block) into the Q buffer's word, where the dynamic walk writes the list index
// otherwise, so that the consumers read their tile rather than compute it. Both walks divide by run-time values:
// causal_lpt by heads per section and blocks per head, the static walk's step_tile by units per head. At
// 16,32,1024,64 causal that was 2.8% of the warp samples, at each tile's start, in both consumer warpgroups of the
// ping-pong (ncu, run 20261128-180404), and handing the tile ran 1.029x there; on the static walk 1.014-1.027x at
// 512-1024 and 1.003x at 8,16,2048,128 (v9_notes, "Step 23"). On three consumers at 8192 and 16384 causal it ran
// 0.97-0.98x (v9_notes, "Step 22 taken"), so it is a wrapper, not the walks' protocol.
template <class Base>
struct HandsTile : Base {
  static constexpr bool kHandsTile = true;
};
LAB_CONFIG_FLAG(HandsConsumersTheTile, kHandsTile);

template <class C>
constexpr int ones_offset() {
  if constexpr (SumsRowsByMma<C>::value) return C::kOnesOffset;
  else return 0;
}

template <class C>
constexpr int q1_offset() {
  if constexpr (HasTwoQBuffers<C>::value) return C::kQ1Offset;
  else return 0;
}


// The kernel's body, inlined into its entries below (fwd_kernel; fwd_kernel_o_tma, which also takes O's tensor
// map; fwd_kernel_dynamic, which also takes the tile counter): the maps are the entries' __grid_constant__
// parameters, passed by address.
template <class C, typename T, bool CAUSAL, bool WRITE_LSE, class Sched, bool GQA>
__device__ __forceinline__ void
fwd_body(const CUtensorMap* tm_q,  // [B*H, nq, D] in boxes of [BM rows, 64 cols]
         const CUtensorMap* tm_k,  // [B*Hkv, nk, D] in boxes of [BN rows, 64 cols]
         const CUtensorMap* tm_v,  // [B*Hkv, nk, D] in boxes of [BN rows, 64 cols]
         const CUtensorMap* tm_o,  // [B*H, nq, D] in boxes of [64 rows, 64 cols] (StoresOByTma only)
         T* __restrict__ o,        // [B*H, nq, D]
         int nq, int nk, int bh_total, float scale_log2,
         float* __restrict__ lse,  // [B*H, nq] natural-log row log-sum-exp (WRITE_LSE only)
         int kv_group,             // GQA: query heads per K/V head; K/V maps are [B*H/kv_group, nk, D]
         int* tile_counter = nullptr) {  // a dynamic scheduler's (Sched::kDynamic): zero at the launch
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = C::D, BN = C::BN, BM = C::BM, S = C::kStages;
  constexpr bool kPersistent = Sched::kPersistent;
  // A dynamic scheduler (tile_scheduler.cuh's LongestFirst): the producer thread takes each next tile from the
  // counter and hands its index to the consumers in a shared word per Q buffer (HandsTile: the tile itself, its head
  // << 32 | its query block), written before the arrival on that buffer's Q barrier (a release) that the consumers
  // wait on (an acquire) anyway; -1: no tile left.
  constexpr bool kDynamic = Sched::kDynamic;
  constexpr bool kHandsTile = HandsConsumersTheTile<C>::value;
  static_assert(!kHandsTile || kPersistent, "HandsTile: a persistent walk's hand-off");
  // A word per Q buffer: the dynamic walk's index, or the handed tile (a static walk's too).
  constexpr bool kTileSlots = kDynamic || kHandsTile;
  constexpr bool kOTma = StoresOByTma<C>::value;
  constexpr bool kOInV = StagesOInLastV<C>::value;
  constexpr bool kOwn = ComputesOwnKeyTiles<C>::value;
  constexpr bool kOwnUniform = ComputesOwnKeyTilesUniformly<C>::value;
  // TwoQBuffers: two Q buffers, used by tiles in turn (a persistent CTA's; one tile per CTA has one).
  constexpr bool kQ2 = HasTwoQBuffers<C>::value && kPersistent;
  constexpr bool kEarlyS0 = IssuesNextS0Early<C>::value;
  static_assert(!kEarlyS0 || (kPersistent && !ComputesOwnKeyTiles<C>::value),
                "NextS0UnderEpilogue: a persistent walk, every key tile of the block");
  constexpr bool kHalfLast = ComputesHalfLastKeyTile<C>::value;
  constexpr bool kTreeMax = ReducesRowMaxAsTree<C>::value;
  constexpr bool kRowLimitMask = MasksByRowLimits<C>::value;
  // RowSumByMma without the LSE only: its sums are of the 16-bit P, within O's tolerance (O averages the same rounded
  // weights) but not the LSE's (bf16 P: up to 2^-9 of a row's sum, 0.0017 of the LSE on step 17's causal 512 rows of
  // a few keys, against the float64 gate's 4.7e-4). The LSE instantiation sums the fp32 P, as its base does.
  constexpr bool kSumMma = SumsRowsByMma<C>::value && !WRITE_LSE;
  constexpr int kON = kSumMma ? D + 8 : D;  // P V's columns: O's, and RowSumByMma's eight of row sums
  static_assert(!SumsRowsByMma<C>::value || ones_offset<C>() + BN * 128 + 1024 == C::kSmemBytes,
                "RowSumByMma: the ones tile is the last buffer (a wrapper that adds one after it would overlap it)");
  static_assert(!(kHalfLast && kEarlyS0), "HalfLastKeyTile: the next tile's S_0 would be issued before its width is known");
  static_assert(!kOInV || (kPersistent && !kOwn && !kEarlyS0 && !kHalfLast),
                "OInLastV: a persistent walk, every key tile of the block, the last P V at full width before the epilogue");
  extern __shared__ uint8_t smem_raw[];
  // Barriers: [0] Q landed; per stage s: K full, K empty, V full, V empty; persistent: [1 + 4S] Q
  // free again (every consumer thread done with the tile's last S = Q K^T); TwoQBuffers: [2 + 4S],
  // [3 + 4S] the same two for the second Q buffer. Dynamic or HandsTile: then one word per Q buffer, its tile's index
  // (HandsTile: the tile).
  constexpr int kBars = 1 + 4 * S + (kPersistent ? 1 : 0) + (kQ2 ? 2 : 0);
  __shared__ __align__(8) uint64_t bars[kBars + (kTileSlots ? 2 : 0)];
  [[maybe_unused]] auto tile_slot = [&](int qb) { return reinterpret_cast<volatile long long*>(&bars[kBars + qb]); };

  const int tid = threadIdx.x;
  // Which tiles, in what order (hopper/tile_scheduler.cuh): one CTA per tile, causal longest-
  // processing-time first in groups of 32 heads (as v5: every head's heaviest query block, then the
  // next heaviest, ... so the tail of the grid is short blocks), non-causal [query blocks, B*H];
  // persistent, units of equal work head by head (causal: the pair of query blocks m-1-p and p).
  const int m_blocks_total = lab_cdiv(nq, BM);
  // The current tile: its first query row, its batch*head, its key tiles (the keys any row of
  // the block sees). A persistent CTA moves them on with next_tile().
  int m0, bh_index;
  // Dynamic: heads per section of the longest-first list (no more than there are), and the producer's next index.
  [[maybe_unused]] int section = 0;
  [[maybe_unused]] long long fetched = 0;
  if constexpr (kDynamic) {
    section = min(Sched::section_heads(nk, D), bh_total);
    const lab_hopper_sched::Tile t = Sched::tile_of(blockIdx.x, m_blocks_total, bh_total, CAUSAL, section);
    m0 = t.m_block * BM;  // grid <= tiles: every CTA's first tile is its own index
    bh_index = t.bh;
  } else if constexpr (kPersistent) {
    const lab_hopper_sched::Tile t = Sched::step_tile(0, m_blocks_total, bh_total, CAUSAL);  // grid <= units
    m0 = t.m_block * BM;
    bh_index = t.bh;
  } else {
    // v6's own statements, kept verbatim: the same order through lab_hopper_sched::causal_lpt
    // compiles to a different instruction schedule (and v6's machine code must not move).
    int m_block;
    if constexpr (CAUSAL) {
      const int m_blocks = lab_cdiv(nq, BM);
      const int group = blockIdx.x / (m_blocks * C::kHeadGroup);
      const int within = blockIdx.x - group * m_blocks * C::kHeadGroup;
      const int heads = min(C::kHeadGroup, bh_total - group * C::kHeadGroup);
      const int rank = within / heads;
      m_block = m_blocks - 1 - rank;
      bh_index = group * C::kHeadGroup + (within - rank * heads);
    } else {
      m_block = blockIdx.x;
      bh_index = blockIdx.y;
    }
    m0 = m_block * BM;
  }
  auto tile_key_tiles = [&]() { return lab_hopper_sched::key_tiles(m0, BM, BN, nq, nk, CAUSAL); };
  int n_tiles = tile_key_tiles();
  // The 128-byte swizzle repeats every 1024 bytes: tiles start on a 1024-byte boundary.
  const uint32_t s_base = (lab_smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_q = s_base;
  auto s_k = [&](int s) { return s_base + C::kKOffset + s * C::kKVBytes; };
  auto s_v = [&](int s) { return s_base + C::kVOffset + s * C::kKVBytes; };
  const uint32_t bar_q = lab_smem_addr(&bars[0]);
  auto k_full = [&](int s) { return lab_smem_addr(&bars[1 + s]); };
  auto k_empty = [&](int s) { return lab_smem_addr(&bars[1 + S + s]); };
  auto v_full = [&](int s) { return lab_smem_addr(&bars[1 + 2 * S + s]); };
  auto v_empty = [&](int s) { return lab_smem_addr(&bars[1 + 3 * S + s]); };
  auto q_empty = [&]() { return lab_smem_addr(&bars[kPersistent ? 1 + 4 * S : 0]); };
  // TwoQBuffers: buffer b's address, Q-landed and Q-free barriers (b = 0: the ones above).
  [[maybe_unused]] auto s_q_of = [&](int b) { return b ? s_base + (uint32_t)q1_offset<C>() : s_q; };
  [[maybe_unused]] auto bar_q_of = [&](int b) { return b ? lab_smem_addr(&bars[2 + 4 * S]) : bar_q; };
  [[maybe_unused]] auto q_empty_of = [&](int b) { return b ? lab_smem_addr(&bars[3 + 4 * S]) : q_empty(); };
  constexpr int kConsumerThreads = 128 * C::kConsumers;

  // After each tile, the producer thread and every consumer thread call this one function on their
  // own copies of the walk (round, it0 and the state above, from the same start): so both sides
  // visit the same tiles with the same key-tile counts, and agree on every K/V stage and parity
  // (a dynamic scheduler's consumers read the index the producer took, so they agree by construction).
  // Returns false when the CTA has no tile left (at once for one tile per CTA). round: tiles done
  // (Q's parity); it0: the K/V ring's running tile count at the next tile's start.
  // The role is a type (kProducer, kConsumer), so that each call site's branch on it folds away: a branch on tid
  // made the tile, and every value that follows from it, look per-thread to ptxas (the first build of step 19).
  int step = 0;
  using Producer = std::true_type;
  using Consumer = std::false_type;
  [[maybe_unused]] constexpr Producer kProducer{};
  [[maybe_unused]] constexpr Consumer kConsumer{};
  // A static walk's next tile (hopper/tile_scheduler.cuh's), for a HandsTile producer: its next step that has one, or
  // kWalkDone. Called as static_step(Sched{}): generic, so that a scheduler without steps (LongestFirst) never
  // instantiates it.
  [[maybe_unused]] auto static_step = [&](auto sched) {
    for (;;) {
      const lab_hopper_sched::Tile t = decltype(sched)::step_tile(++step, m_blocks_total, bh_total, CAUSAL);
      if (t.m_block != lab_hopper_sched::kWalkSkip) return t;
    }
  };
  auto advance = [&](int& round, int& it0, auto role) {
    [[maybe_unused]] constexpr bool kIsProducer = decltype(role)::value;
    if constexpr (!kPersistent) {
      return false;
    } else {
      it0 += n_tiles;
      ++round;
      if constexpr (kTileSlots) {
        // The producer thread has the index from its atomicAdd (a static walk: it takes the walk's next step); a
        // consumer reads the index (HandsTile: the tile) from the word of the Q buffer the next tile uses, once that
        // buffer's barrier says the producer wrote it (the tile loop's wait on the same phase then passes at once).
        [[maybe_unused]] long long index = fetched;
        if constexpr (!kIsProducer) {
          const int qb = kQ2 ? (round & 1) : 0;
          lab_mbar_wait(bar_q_of(qb), (kQ2 ? (round >> 1) : round) & 1);
          index = *tile_slot(qb);
        }
        lab_hopper_sched::Tile t;
        if constexpr (kHandsTile && !kIsProducer) {
          t = index < 0 ? lab_hopper_sched::Tile{lab_hopper_sched::kWalkDone, 0}
                        : lab_hopper_sched::Tile{(int)(index & 0x7fffffff), (int)(index >> 32)};
        } else if constexpr (kDynamic) {
          t = Sched::tile_of(index, m_blocks_total, bh_total, CAUSAL, section);
        } else {
          t = static_step(Sched{});
        }
        if (t.m_block == lab_hopper_sched::kWalkDone) {
          if constexpr (kIsProducer) {
            if constexpr (kDynamic) {
              // This CTA's last look at the counter is done. The last CTA to get here returns the counter and this
              // tally to zero (common.cuh's zeroed counters: the next launch on the stream finds them so, and needs
              // no memset): every CTA's fetches come before its tally (the fence), so once the tally reaches the
              // grid no fetch of this launch is left.
              __threadfence();
              if (atomicAdd(tile_counter + 1, 1) == (int)gridDim.x - 1) {
                atomicExch(tile_counter, 0);
                atomicExch(tile_counter + 1, 0);
              }
            }
            // The consumers wait for a tile on this Q buffer's barrier. Its word says -1, written once they are done
            // with the buffer (as for a tile), and a plain arrival (no bytes) ends the phase.
            const int qb = kQ2 ? (round & 1) : 0;
            lab_mbar_wait(q_empty_of(qb), (((kQ2 ? (round >> 1) : round)) & 1) ^ 1);
            *tile_slot(qb) = -1;
            lab_mbar_arrive(bar_q_of(qb));
          }
          return false;
        }
        m0 = t.m_block * BM;
        bh_index = t.bh;
        n_tiles = tile_key_tiles();
        return true;
      } else {
        // The static walk's own loop, not static_step: the index-computing kernels' machine code as before step 23.
        for (;;) {
          const lab_hopper_sched::Tile t = Sched::step_tile(++step, m_blocks_total, bh_total, CAUSAL);
          if (t.m_block == lab_hopper_sched::kWalkDone) return false;
          if (t.m_block == lab_hopper_sched::kWalkSkip) continue;
          m0 = t.m_block * BM;
          bh_index = t.bh;
          n_tiles = tile_key_tiles();
          return true;
        }
      }
    }
  };


  if (tid == 0) {
    lab_mbar_init(bar_q, 1);
    for (int s = 0; s < S; ++s) {
      lab_mbar_init(k_full(s), 1);
      lab_mbar_init(v_full(s), 1);
      lab_mbar_init(k_empty(s), kConsumerThreads);
      lab_mbar_init(v_empty(s), kConsumerThreads);
    }
    if constexpr (kPersistent) lab_mbar_init(q_empty(), kConsumerThreads);
    if constexpr (kQ2) {
      lab_mbar_init(bar_q_of(1), 1);
      lab_mbar_init(q_empty_of(1), kConsumerThreads);
    }
    lab_fence_mbar_init();
  }
  if constexpr (kSumMma) {
    // RowSumByMma: the ones tile, by every thread, made visible to wgmma (the async proxy) before the barrier.
    const uint32_t one2 = lab_pack2<T>(1.f, 1.f);
    for (int w = tid; w < C::BN * 128 / 4; w += C::kThreads) lab_st_shared_b32(s_base + ones_offset<C>() + w * 4, one2);
    lab_fence_proxy_async_shared();
  }
  __syncthreads();

  const int warpgroup = tid / 128;
  if (warpgroup == 0) {
    // ---------------- producer: one thread issues every TMA copy ----------------
    lab_setmaxnreg_dec<kPersistent ? C::kPersistentProducerRegs : C::kProducerRegs>();
    if (tid == 0) {
      lab_tma_prefetch_map(tm_q);
      lab_tma_prefetch_map(tm_k);
      lab_tma_prefetch_map(tm_v);
      // it0: the K/V ring's running tile count at this tile's start (0 for one tile per CTA).
      for (int round = 0, it0 = 0;;) {
        // The consumers still read Q until the previous tile's last S = Q K^T is done (TwoQBuffers:
        // the tile before it, which used this tile's buffer; buffer b's use round >> 1).
        const int qb = kQ2 ? (round & 1) : 0;
        const int q_use = kQ2 ? (round >> 1) : round;
        if constexpr (kPersistent) lab_mbar_wait(q_empty_of(qb), (q_use & 1) ^ 1);
        if constexpr (kHandsTile) *tile_slot(qb) = (long long)bh_index << 32 | (m0 / BM);
        else if constexpr (kDynamic) *tile_slot(qb) = round == 0 ? (long long)blockIdx.x : fetched;
        lab_mbar_arrive_expect_tx(bar_q_of(qb), C::kQBytes);
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h)
          lab_tma_load_3d(s_q_of(qb) + h * BM * 128, tm_q, bar_q_of(qb), h * 64, m0, bh_index);
        // Dynamic: the next tile's index, its atomic in flight under this tile's K/V loads.
        if constexpr (kDynamic) fetched = (long long)atomicAdd(tile_counter, 1) + gridDim.x;
        const int kv_index = GQA ? bh_index / kv_group : bh_index;  // this query head's K/V head
        for (int j = 0; j < n_tiles; ++j) {
          const int s = (it0 + j) % S;
          const uint32_t parity = (((it0 + j) / S) & 1) ^ 1;  // first pass: the fresh slot counts as free
          lab_mbar_wait(k_empty(s), parity);
          lab_mbar_arrive_expect_tx(k_full(s), C::kKVBytes);
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            lab_tma_load_3d(s_k(s) + h * BN * 128, tm_k, k_full(s), h * 64, j * BN, kv_index);
          lab_mbar_wait(v_empty(s), parity);
          lab_mbar_arrive_expect_tx(v_full(s), C::kKVBytes);
#pragma unroll
          for (int h = 0; h < C::kHalves; ++h)
            lab_tma_load_3d(s_v(s) + h * BN * 128, tm_v, v_full(s), h * 64, j * BN, kv_index);
        }
        if (!advance(round, it0, kProducer)) break;
      }
    }
    return;
  }

  // ---------------- consumers: S = Q K^T, online softmax, O += P V ----------------
  lab_setmaxnreg_inc<kPersistent ? C::kPersistentConsumerRegs : C::kConsumerRegs>();
  const int cw = warpgroup - 1;          // consumer warpgroup: query rows m0 + 64 cw ..
  const int ctid = tid - 128;            // 0 .. kConsumerThreads-1
  const int lane = tid & 31, warp_in_wg = (tid / 32) & 3;
  int wg_row0, row_g;  // this warpgroup's first row and this thread's rows (row_g, row_g + 8): per tile
  (void)ctid;

  float o_acc[kON / 2];  // m64nD accumulator: D/8 column blocks x 4 (RowSumByMma: one more, the row sums)
  float s_acc[BN / 2];  // m64nBN accumulator
  uint32_t p_frag[BN / 16][4];
  float row_max[2], row_sum[2];
  [[maybe_unused]] uint32_t s_q_tile = s_q;  // TwoQBuffers: the current tile's Q buffer

  // Descriptors. Q and K are K-major (D contiguous), in 64-column swizzle atoms of [rows x 128 B];
  // 8-row groups 1024 bytes apart (stride byte offset); a k16 step inside an atom is +32 bytes.
  // V is read MN-major (D contiguous, keys the reduction): 64-column atoms BN*128 bytes apart
  // (leading byte offset), 8-key groups 1024 apart, a k16 step (16 keys) is +2048 bytes.
  // Width W: the key columns a key tile's softmax and P V take, kFull (BN) or, HalfLastKeyTile's last
  // tile, kHalf (BN / 2), as a compile-time constant so that each width is its own unrolled code. S =
  // Q K^T is always the full m64nBN product: an m64n64 one for the half tile (step 7 (a), and a first
  // version of step 11) made ptxas serialize the kernel's products (C7511), in some instantiations
  // even with its choice made where no product is in flight.
  using Full = std::integral_constant<int, BN>;
  using Half = std::integral_constant<int, BN / 2>;
  constexpr Full kFull{};
  [[maybe_unused]] constexpr Half kHalf{};
  auto issue_s = [&](int stage) {
    lab_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t q_addr = (kQ2 ? s_q_tile : s_q) + (kk / 4) * BM * 128 + cw * 64 * 128 + (kk % 4) * 32;
      const uint32_t k_addr = s_k(stage) + (kk / 4) * BN * 128 + (kk % 4) * 32;
      lab_wgmma_ss<T, BN>(s_acc, lab_wgmma_desc_sw128(q_addr, 16, 1024), lab_wgmma_desc_sw128(k_addr, 16, 1024),
                      kk > 0 ? 1 : 0);
    }
    lab_wgmma_commit();
  };
  auto issue_pv = [&](int stage, auto width) {
    constexpr int W = decltype(width)::value;
    lab_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < W / 16; ++kk)
      lab_wgmma_rs_tb<T, kON>(o_acc, p_frag[kk], lab_wgmma_desc_sw128(s_v(stage) + kk * 2048,
                                                                       kSumMma ? s_base + ones_offset<C>() - s_v(stage) : BN * 128, 1024));
    lab_wgmma_commit();
  };

  // Softmax of the S tile j in s_acc (scores -> probabilities, fp32, in place); returns the factor
  // alpha by which O and the running sums shrink (the running max moved from m_old to m_new).
  auto softmax = [&](int j, float (&alpha)[2], auto width) {
    constexpr int W = decltype(width)::value;
    const int n0 = j * BN;
    // Mask only the ragged last tile and, causal, tiles crossing this warpgroup's diagonal.
    if (n0 + W > nk || (CAUSAL && n0 + W - 1 > wg_row0)) {
      const int col0 = n0 + (lane & 3) * 2;
      if constexpr (kRowLimitMask) {
        int limit[2];  // row h keeps the columns col0 + c with c < limit[h]
#pragma unroll
        for (int h = 0; h < 2; ++h) limit[h] = (CAUSAL ? min(nk, row_g + h * 8 + 1) : nk) - col0;
#pragma unroll
        for (int i = 0; i < W / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (i * 8 + (e & 1) >= limit[e >> 1]) s_acc[i * 4 + e] = -INFINITY;
      } else {
#pragma unroll
        for (int i = 0; i < W / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = col0 + i * 8 + (e & 1), row = row_g + (e >> 1) * 8;
            if (col >= nk || (CAUSAL && col > row)) s_acc[i * 4 + e] = -INFINITY;
          }
      }
    }
    // The row max over the thread's columns (TreeRowMax: as a tree, both rows before either's shuffles).
    [[maybe_unused]] float tree_mx[2];
    if constexpr (kTreeMax) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m[W / 8];
#pragma unroll
        for (int i = 0; i < W / 8; ++i) m[i] = fmaxf(s_acc[i * 4 + 2 * h], s_acc[i * 4 + 2 * h + 1]);
        // One loop a level (W / 8 = 16 or 8 leaves): a loop over the levels left m[] in local memory.
        static_assert(W / 8 <= 16 && (W / 8 & (W / 8 - 1)) == 0, "TreeRowMax: a power of two leaves, four levels at most");
#pragma unroll
        for (int i = 0; i < W / 16; ++i) m[i] = fmaxf(m[i], m[i + W / 16]);
#pragma unroll
        for (int i = 0; i < W / 32; ++i) m[i] = fmaxf(m[i], m[i + W / 32]);
#pragma unroll
        for (int i = 0; i < W / 64; ++i) m[i] = fmaxf(m[i], m[i + W / 64]);
#pragma unroll
        for (int i = 0; i < W / 128; ++i) m[i] = fmaxf(m[i], m[i + W / 128]);
        tree_mx[h] = m[0];
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) tree_mx[h] = fmaxf(tree_mx[h], __shfl_xor_sync(0xffffffffu, tree_mx[h], 1));
#pragma unroll
      for (int h = 0; h < 2; ++h) tree_mx[h] = fmaxf(tree_mx[h], __shfl_xor_sync(0xffffffffu, tree_mx[h], 2));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
      float mx;
      if constexpr (kTreeMax) {
        mx = tree_mx[h];
      } else {
        mx = fmaxf(s_acc[2 * h], s_acc[2 * h + 1]);
#pragma unroll
        for (int i = 1; i < W / 8; ++i) mx = fmaxf(mx, fmaxf(s_acc[i * 4 + 2 * h], s_acc[i * 4 + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      }
      // Every row sees key 0 in tile 0 and at least one key of every later tile it reads (the
      // causal diagonal tile starts at or before the block's first row), so m_new is finite.
      const float m_new = fmaxf(row_max[h], mx * scale_log2);
      alpha[h] = lab_exp2(row_max[h] - m_new);  // first tile: 2^-inf = 0
      row_max[h] = m_new;
      [[maybe_unused]] float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
      for (int i = 0; i < W / 8; ++i) {
        const float p0 = lab_exp2(fmaf(s_acc[i * 4 + 2 * h], scale_log2, -m_new));
        const float p1 = lab_exp2(fmaf(s_acc[i * 4 + 2 * h + 1], scale_log2, -m_new));
        s_acc[i * 4 + 2 * h] = p0;
        s_acc[i * 4 + 2 * h + 1] = p1;
        if constexpr (!kSumMma) {
          sum0 += p0;
          sum1 += p1;
        }
      }
      if constexpr (!kSumMma) row_sum[h] = row_sum[h] * alpha[h] + (sum0 + sum1);
    }
  };
  // P (16-bit) as the A operand of P V: k-step kk covers key blocks 2kk and 2kk+1.
  auto pack_p = [&](auto width) {
    constexpr int W = decltype(width)::value;
#pragma unroll
    for (int kk = 0; kk < W / 16; ++kk) {
      p_frag[kk][0] = lab_pack2<T>(s_acc[8 * kk + 0], s_acc[8 * kk + 1]);
      p_frag[kk][1] = lab_pack2<T>(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
      p_frag[kk][2] = lab_pack2<T>(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
      p_frag[kk][3] = lab_pack2<T>(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < kON / 8; ++i) {
      o_acc[i * 4 + 0] *= alpha[0];
      o_acc[i * 4 + 1] *= alpha[0];
      o_acc[i * 4 + 2] *= alpha[1];
      o_acc[i * 4 + 3] *= alpha[1];
    }
  };

  // Ping-pong: warpgroup cw issues its products after the other one has issued its own.
  constexpr int kBarIssue = 1;  // named barriers 1 + cw (0 is __syncthreads)
  // StoresOByTma: this warpgroup's O boxes, the thread that stores them, its barrier (3 + cw).
  constexpr int kBarO = 3;
  [[maybe_unused]] uint32_t s_o = 0;
  [[maybe_unused]] bool o_storer = false;
  constexpr int kBarVRead = 5;  // OInLastV: named barriers 5 + cw
  if constexpr (kOTma) {
    if constexpr (!kOInV) s_o = s_base + C::kOOffset + cw * C::kHalves * C::kOBoxBytes;
    o_storer = (tid & 127) == 0;
    if (o_storer) lab_tma_prefetch_map(tm_o);
  }
  auto turn_wait = [&]() {
    if constexpr (C::kPingPong) lab_named_sync(kBarIssue + cw, kConsumerThreads);
  };
  auto turn_pass = [&]() {
    if constexpr (C::kPingPong) lab_named_arrive(kBarIssue + (cw ^ 1), kConsumerThreads);
  };
  // Persistent ping-pong: the turns alternate across the CTA's tiles without a break (both warpgroups
  // take n_tiles + 1 turns per tile), so warpgroup 1 lets warpgroup 0 go first once per CTA and
  // warpgroup 0 takes the last pass once, after its last tile. Re-arming per tile (as one tile per
  // CTA does below) races: bar.arrive does not wait, so warpgroup 1's last pass of a tile and its
  // opening pass of the next could both reach barrier 1 before warpgroup 0's closing sync, and 256
  // arrivals of warpgroup 1 alone would complete it.
  if constexpr (kPersistent && C::kPingPong) {
    if (cw == 1) lab_named_arrive(kBarIssue + 0, kConsumerThreads);
  }
  // NextS0UnderEpilogue: the first tile's S_0 is issued here, every later tile's under the epilogue
  // of the tile before it (below), so S_0 is in flight at the top of the tile loop.
  if constexpr (kEarlyS0) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s_acc[i] = 0.f;
    if constexpr (kQ2) s_q_tile = s_q_of(0);
    lab_mbar_wait(bar_q_of(0), 0);
    lab_mbar_wait(k_full(0), 0);
    issue_s(0);
  }
  // One pass per tile (once for one tile per CTA); it0: the K/V ring's running tile count.
  for (int round = 0, it0 = 0;;) {
    wg_row0 = m0 + cw * 64;
    row_g = wg_row0 + warp_in_wg * 16 + (lane >> 2);
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
#pragma unroll
    for (int i = 0; i < kON / 2; ++i) o_acc[i] = 0.f;
    if constexpr (!kEarlyS0) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s_acc[i] = 0.f;
    }

    if constexpr (!kPersistent && C::kPingPong) {
      if (cw == 1) lab_named_arrive(kBarIssue + 0, kConsumerThreads);  // warpgroup 0 goes first
    }

    // OwnKeyTiles: the key tiles this warpgroup's rows see (at least 1: a warpgroup whose rows are
    // all past nq computes key tile 0, so that every warpgroup runs the tile's one code path); else
    // the block's. The warpgroup computes key tiles 0 .. n_mine - 1 and hands the rest back unread.
    // OwnKeyTilesUniform: the same count from the warpgroup index broadcast from lane 0, which ptxas
    // knows is warp-uniform (from tid it compiled the key loop below as divergent: v9_notes, step 5 (b)).
    int n_mine = n_tiles;
    if constexpr (kOwn && kOwnUniform) {
      const int wg_row0_u = m0 + (__shfl_sync(0xffffffffu, warpgroup, 0) - 1) * 64;
      n_mine = wg_row0_u < nq ? lab_hopper_sched::key_tiles(wg_row0_u, 64, BN, nq, nk, CAUSAL) : 1;
    } else if constexpr (kOwn) {
      n_mine = wg_row0 < nq ? lab_hopper_sched::key_tiles(wg_row0, 64, BN, nq, nk, CAUSAL) : 1;
    }

    // TwoQBuffers: this tile's buffer (tile & 1) and its use (tile >> 1).
    const int qb = kQ2 ? (round & 1) : 0;
    if constexpr (kQ2) {
      // Two consumers (D=128): opaque (an empty asm), so ptxas keeps the tile's Q base in a register; seen
      // through, it selected between the two buffers inside the key loop (665 -> 687-697 instructions a key
      // tile; opaque 667). One consumer (D=64) compiles its base's key loop without it (594) and 615 with.
      s_q_tile = s_q_of(qb);
      if constexpr (C::kConsumers >= 2) asm volatile("" : "+r"(s_q_tile));
    }
    // The epilogue's tile (NextS0UnderEpilogue moves the walk on before it) and whether one follows.
    [[maybe_unused]] const int tile_bh = bh_index;
    [[maybe_unused]] bool more = false;

    // HalfLastKeyTile: whether this warpgroup's last key tile's second half is masked whole (its keys all
    // past nk or, causal, past the warpgroup's last row). The tile runs the one key loop below either way;
    // a half tile's last key step is peeled off it (its softmax and P at 64 columns, then half of the last
    // P V's k-steps). With one consumer the warpgroup's rows are the block's, which ptxas keeps in uniform
    // registers; with two, the warpgroup index is broadcast from lane 0 so that ptxas knows the branch is
    // warp-uniform (step 6 (a)). The broadcast with one consumer too moved the key loop's V descriptors into
    // per-thread registers (667 -> 687 instructions a key step at D=64 causal).
    [[maybe_unused]] bool half = false;
    if constexpr (kHalfLast) {
      const int wg_last_row = m0 + (C::kConsumers == 1 ? 0 : __shfl_sync(0xffffffffu, warpgroup, 0) - 1) * 64 + 63;
      const int second_half = (n_mine - 1) * BN + BN / 2;
      half = second_half >= nk || (CAUSAL && second_half > wg_last_row);
    }
    // Tile 0: S_0 (NextS0UnderEpilogue: already in flight), its softmax, P_0.
    if constexpr (!kEarlyS0) {
      lab_mbar_wait(bar_q_of(qb), (kQ2 ? (round >> 1) : round) & 1);
      lab_mbar_wait(k_full(it0 % S), (it0 / S) & 1);
      turn_wait();
      issue_s(it0 % S);
      turn_pass();
    }
    lab_wgmma_wait<0>();
    lab_fence_regs(s_acc);
    lab_mbar_arrive(k_empty(it0 % S));
    {
      // HalfLastKeyTile: at full width even where this is the half tile (a tile of one key tile): its P is 0
      // past the mask, so the last P V's half reads all there is. A half-width softmax here left P's second
      // half unwritten on a path into the loop's full P V, and ptxas serialized every wgmma (C7511).
      float alpha[2];
      softmax(0, alpha, kFull);  // O is zero: nothing to rescale
      pack_p(kFull);
    }

    // Steady state, iteration j: S_j = Q K_j^T and O += P_{j-1} V_{j-1} are both issued, then the
    // softmax of S_j runs while P_{j-1} V_{j-1} is still on the tensor cores; O is rescaled and P_j
    // packed only after that product has finished reading P's registers and writing O's.
    // HalfLastKeyTile: a half tile's last step is peeled off (below).
    const int n_loop = kHalfLast && half ? n_mine - 1 : n_mine;
    for (int j = 1; j < n_loop; ++j) {
      const int sk = (it0 + j) % S, sv = (it0 + j - 1) % S;
      lab_mbar_wait(k_full(sk), ((it0 + j) / S) & 1);
      lab_mbar_wait(v_full(sv), ((it0 + j - 1) / S) & 1);
      turn_wait();
      issue_s(sk);
      issue_pv(sv, kFull);
      turn_pass();
      lab_wgmma_wait<1>();  // S_j done (groups complete in order); P V may still run
      lab_fence_regs(s_acc);
      lab_mbar_arrive(k_empty(sk));
      float alpha[2];
      softmax(j, alpha, kFull);
      lab_wgmma_wait<0>();
      lab_fence_regs(o_acc);
      lab_fence_regs(p_frag);
      lab_mbar_arrive(v_empty(sv));
      rescale_o(alpha);
      pack_p(kFull);
    }
    if constexpr (kHalfLast) {
      // ---- HalfLastKeyTile: begin (tests/test_fwd_pipeline_model.py counts this block's barrier sites apart:
      // the loop body's, one for one). The half tile's key step, the loop's body at 64 columns: it starts
      // with no product in flight and ends with none.
      if (half && n_mine > 1) {
        const int j = n_mine - 1;
        const int sk = (it0 + j) % S, sv = (it0 + j - 1) % S;
        lab_mbar_wait(k_full(sk), ((it0 + j) / S) & 1);
        lab_mbar_wait(v_full(sv), ((it0 + j - 1) / S) & 1);
        turn_wait();
        issue_s(sk);
        issue_pv(sv, kFull);
        turn_pass();
        lab_wgmma_wait<1>();
        lab_fence_regs(s_acc);
        lab_mbar_arrive(k_empty(sk));
        float alpha[2];
        softmax(j, alpha, kHalf);
        lab_wgmma_wait<0>();
        lab_fence_regs(o_acc);
        lab_fence_regs(p_frag);
        lab_mbar_arrive(v_empty(sv));
        rescale_o(alpha);
        pack_p(kHalf);
      }
      // ---- HalfLastKeyTile: end
    }
    // Every S = Q K^T of this tile is done: the producer may load the next tile's Q.
    if constexpr (kPersistent) lab_mbar_arrive(q_empty_of(qb));
    {
      const int sv = (it0 + n_mine - 1) % S;
      lab_mbar_wait(v_full(sv), ((it0 + n_mine - 1) / S) & 1);
      turn_wait();
      if constexpr (kHalfLast) {
        // Each width's product issued and waited for in its own branch: one group left in flight across
        // the branches' join (a choice of shape with a product in flight) made ptxas serialize every wgmma
        // of the kernel (C7511).
        if (half) {
          issue_pv(sv, kHalf);
          turn_pass();
          lab_wgmma_wait<0>();
        } else {
          issue_pv(sv, kFull);
          turn_pass();
          lab_wgmma_wait<0>();
        }
      } else if constexpr (kEarlyS0) {
        issue_pv(sv, kFull);
        turn_pass();
        // The next tile's S_0 behind the last P V, once its Q and first K are in; after the CTA's
        // last tile, the same product on the buffers as they are (its result unused), so that every
        // tile runs one code path with one wgmma group left in flight.
        more = advance(round, it0, kConsumer);
        if (more) {
          const int qn = kQ2 ? (round & 1) : 0;
          if constexpr (kQ2) s_q_tile = s_q_of(qn);
          lab_mbar_wait(bar_q_of(qn), (kQ2 ? (round >> 1) : round) & 1);
          lab_mbar_wait(k_full(it0 % S), (it0 / S) & 1);
        }
        issue_s(it0 % S);
        lab_wgmma_wait<1>();  // the last P V done; S_0 may still run
      } else {
        issue_pv(sv, kFull);
        turn_pass();
        lab_wgmma_wait<0>();
      }
      lab_fence_regs(o_acc);
      lab_fence_regs(p_frag);
      // The tile's last V stage goes back to the producer like every other (the loop above frees
      // V_{j-1} only). This release was missing when v9 first ran (H200, 2026-11-26): harmless with
      // one tile per CTA (its ring is never refilled), but a persistent CTA's producer, coming back
      // to this stage S K/V tiles later (in the next tile: its second at S = 2), waited on v_empty
      // for a phase no consumer would complete, and the consumers on k_full for the K tile after
      // it: every shape where a CTA runs a second tile hung (benchmarks/v9_notes.md).
      // tests/test_fwd_pipeline_model.py replays this protocol on the CPU and deadlocks without it.
      // OwnKeyTiles: the producer may refill this stage within the tile (key tiles this warpgroup
      // skips), so it goes back with one tile per CTA too.
      if constexpr ((kPersistent || kOwn) && !kOInV) lab_mbar_arrive(v_empty(sv));
      if constexpr (kOInV && C::kConsumers == 2) lab_named_arrive(kBarVRead + (cw ^ 1), kConsumerThreads);
    }
    if constexpr (kOwn) {
      // The stages of the key tiles this warpgroup's rows do not see, back unread, in the ring's order.
      for (int j = n_mine; j < n_tiles; ++j) {
        const int s = (it0 + j) % S;
        const uint32_t parity = ((it0 + j) / S) & 1;
        lab_mbar_wait(k_full(s), parity);
        lab_mbar_arrive(k_empty(s));
        lab_mbar_wait(v_full(s), parity);
        lab_mbar_arrive(v_empty(s));
      }
    }
    if constexpr (!kPersistent && C::kPingPong) {
      // Balance the turn barrier: the last pass went to the other warpgroup, which will not wait
      // for it again; warpgroup 1 consumes warpgroup 0's last pass, warpgroup 0 got one extra at start.
      if (cw == 0) lab_named_sync(kBarIssue + 0, kConsumerThreads);
    }

    // Epilogue: O / l, straight from the accumulator to global memory (a quad writes 16 contiguous
    // bytes of a row; rows past nq are not written); StoresOByTma: into this warpgroup's box of the
    // O buffer, then one TMA store (OByTma's comment), once the previous tile's store has read it.
    // The thread's row in the box (r below, less h * 8), its column quad's byte offset and whether it
    // stores the boxes. Three consumer warpgroups (160 registers a thread): ptxas computes these and
    // the swizzled addresses once, before the tile loop, and spills three (nvcc 13.0: 4-16 bytes a
    // kernel), so there they come from an opaque copy of the thread index (an empty asm), per tile.
    // One and two consumers keep their code (and machine code) as it was.
    constexpr bool kOpaqueBox = kOTma && C::kConsumers == 3;
    [[maybe_unused]] int box_row = 0, quad_bytes = 0;
    [[maybe_unused]] bool storer = o_storer;
    if constexpr (kOpaqueBox) {
      int t = tid;
      asm volatile("" : "+r"(t));
      box_row = ((t >> 5) & 3) * 16 + ((t & 31) >> 2);
      quad_bytes = (t & 3) * 4;
      storer = (t & 127) == 0;
    }
    // OInLastV: O goes into this warpgroup's part of the tile's last V stage, once both warpgroups have read it.
    [[maybe_unused]] const int sv_last = (it0 + n_mine - 1) % S;
    if constexpr (kOInV) {
      s_o = s_v(sv_last) + cw * C::kHalves * C::kOBoxBytes;
      if constexpr (C::kConsumers == 2) lab_named_sync(kBarVRead + cw, kConsumerThreads);
    } else if constexpr (kOTma) {
      if (storer) lab_bulk_wait_read<0>();
      lab_named_sync(kBarO + cw, 128);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l;
      if constexpr (kSumMma) {
        l = o_acc[(D / 8) * 4 + 2 * h];  // column 64 + 2 (lane % 4) of P V: the row's whole sum
      } else {
        l = row_sum[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
      }
      const float inv = 1.f / l;
      const int row = row_g + h * 8;
      // The backward's statistic (common.cuh's backward contract): log sum_j exp(scale q.k_j) =
      // (m + log2 l) ln 2, m the running max in log2 units that every exponent above subtracted.
      if constexpr (WRITE_LSE) {
        if ((lane & 3) == 0 && row < nq) lse[(size_t)tile_bh * nq + row] = (row_max[h] + __log2f(l)) * 0.6931471805599453f;
      }
      if constexpr (kOTma) {
        // Row r of the warpgroup's box, columns 8i + 2(lane % 4): box i / 8, 16-byte chunk i % 8 of
        // the row XOR r % 8 (the 128-byte swizzle; r % 8 = lane / 4: a warp's 8 rows x 4 quads hit
        // 32 distinct banks).
        if constexpr (kOpaqueBox) {
          const int r = box_row + h * 8;
#pragma unroll
          for (int i = 0; i < D / 8; ++i)
            lab_st_shared_b32(s_o + (i / 8) * C::kOBoxBytes + r * 128 + (((i & 7) ^ (r & 7)) << 4) + quad_bytes,
                              lab_pack2<T>(o_acc[i * 4 + 2 * h] * inv, o_acc[i * 4 + 2 * h + 1] * inv));
        } else {
          const int r = row_g - wg_row0 + h * 8;
#pragma unroll
          for (int i = 0; i < D / 8; ++i)
            lab_st_shared_b32(s_o + (i / 8) * C::kOBoxBytes + r * 128 + (((i & 7) ^ (r & 7)) << 4) + (lane & 3) * 4,
                              lab_pack2<T>(o_acc[i * 4 + 2 * h] * inv, o_acc[i * 4 + 2 * h + 1] * inv));
        }
      } else if (row < nq) {
        T* dst = o + ((size_t)tile_bh * nq + row) * D + (lane & 3) * 2;
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
          *reinterpret_cast<uint32_t*>(dst + i * 8) = lab_pack2<T>(o_acc[i * 4 + 2 * h] * inv, o_acc[i * 4 + 2 * h + 1] * inv);
      }
    }
    if constexpr (kOTma) {
      lab_fence_proxy_async_shared();  // the generic-proxy stores above, visible to the copy engine
      lab_named_sync(kBarO + cw, 128);
      if (storer) {
#pragma unroll
        for (int hh = 0; hh < C::kHalves; ++hh) lab_tma_store_3d(tm_o, s_o + hh * C::kOBoxBytes, hh * 64, wg_row0, tile_bh);
        lab_bulk_commit();
      }
      if constexpr (kOInV) {
        if (storer) lab_bulk_wait_read<0>();  // the stage back only once the store has read O out of it
        lab_mbar_arrive(v_empty(sv_last));
      }
    }
    if constexpr (kEarlyS0) {
      if (!more) {
        lab_wgmma_wait<0>();  // the unused product
        break;
      }
    } else if (!advance(round, it0, kConsumer)) {
      break;
    }
  }
  if constexpr (kPersistent && C::kPingPong) {
    // The turn barriers' balance, once per CTA (see the tile loop's start).
    if (cw == 0) lab_named_sync(kBarIssue + 0, kConsumerThreads);
  }
  // The last store has to have read shared memory before the CTA exits (and written O).
  if constexpr (kOTma) {
    if (o_storer) lab_bulk_wait<0>();
  }
#else
  // Built for another target: the launcher refuses before launching (wgmma/TMA need sm_90a).
  __trap();
#endif
}

template <class C, typename T, bool CAUSAL, bool WRITE_LSE, class Sched = lab_hopper_sched::OneTilePerCta,
          bool GQA = false>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
           const __grid_constant__ CUtensorMap tm_v, T* __restrict__ o, int nq, int nk, int bh_total,
           float scale_log2, float* __restrict__ lse, int kv_group) {
  fwd_body<C, T, CAUSAL, WRITE_LSE, Sched, GQA>(&tm_q, &tm_k, &tm_v, nullptr, o, nq, nk, bh_total, scale_log2, lse,
                                                kv_group);
}

// O stored by TMA (StoresOByTma<C>): the same body with O's tensor map.
template <class C, typename T, bool CAUSAL, bool WRITE_LSE, class Sched, bool GQA>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
fwd_kernel_o_tma(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                 const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                 T* __restrict__ o, int nq, int nk, int bh_total, float scale_log2, float* __restrict__ lse,
                 int kv_group) {
  fwd_body<C, T, CAUSAL, WRITE_LSE, Sched, GQA>(&tm_q, &tm_k, &tm_v, &tm_o, o, nq, nk, bh_total, scale_log2, lse,
                                                kv_group);
}

// A dynamic scheduler (Sched::kDynamic): the same body with O's tensor map (when StoresOByTma<C>) and the tile counter.
template <class C, typename T, bool CAUSAL, bool WRITE_LSE, class Sched, bool GQA>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
fwd_kernel_dynamic(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                   T* __restrict__ o, int nq, int nk, int bh_total, float scale_log2, float* __restrict__ lse,
                   int kv_group, int* tile_counter) {
  fwd_body<C, T, CAUSAL, WRITE_LSE, Sched, GQA>(&tm_q, &tm_k, &tm_v, StoresOByTma<C>::value ? &tm_o : nullptr, o, nq, nk,
                                                bh_total, scale_log2, lse, kv_group, tile_counter);
}

// The bytes of the forward workspace a launch of scheduler Sched needs (common.cuh's forward workspace contract):
// a dynamic scheduler's tile counter and the tally of CTAs done with it (its last CTA zeroes both), used where the
// lab gives no zeroed counters (a graph capture once its capture slab is spent).
template <class Sched>
constexpr size_t workspace_bytes() {
  return Sched::kDynamic ? 2 * sizeof(int) : 0;
}

// The launch: tensor maps (TMA descriptors) for Q, K, V, then the kernel on `stream`.
template <class C, typename T, bool CAUSAL, bool WRITE_LSE, class Sched, bool GQA>
const char* launch_kernel(const LabAttentionArgs* a, cudaStream_t stream) {
  constexpr bool kOTma = StoresOByTma<C>::value;
  auto kernel = [] {
    if constexpr (Sched::kDynamic) return fwd_kernel_dynamic<C, T, CAUSAL, WRITE_LSE, Sched, GQA>;
    else if constexpr (kOTma) return fwd_kernel_o_tma<C, T, CAUSAL, WRITE_LSE, Sched, GQA>;
    else return fwd_kernel<C, T, CAUSAL, WRITE_LSE, Sched, GQA>;
  }();
  if constexpr (Sched::kDynamic) {
    static_assert(workspace_bytes<Sched>() <= kLabCounterBytes, "the dynamic walk's counters exceed common.cuh's");
    if (a->counters == nullptr && (a->workspace == nullptr || a->workspace_bytes < workspace_bytes<Sched>()))
      return "a dynamic tile scheduler needs the lab's zeroed counters or, where there are none, the "
             "forward workspace (common.cuh): its lab_forward_<id>_workspace must ask for "
             "lab_hopper_fwd::workspace_bytes<Sched>() bytes";
  }
  static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
  if (attr != cudaSuccess) return cudaGetErrorString(attr);
  const int bh = a->batch * a->heads;
  // GQA: K and V hold heads_kv heads, each read by heads / heads_kv query heads.
  const int kv_group = a->heads / a->heads_kv, bh_kv = a->batch * a->heads_kv;
  CUtensorMap tm_q, tm_k, tm_v;
  if (!lab_tma_map_3d<T>(&tm_q, a->q, C::D, a->seqlen_q, bh, C::BM) || !lab_tma_map_3d<T>(&tm_k, a->k, C::D, a->seqlen_k, bh_kv, C::BN) ||
      !lab_tma_map_3d<T>(&tm_v, a->v, C::D, a->seqlen_k, bh_kv, C::BN))
    return "cuTensorMapEncodeTiled refused a tensor map (q, k, v must be contiguous and 16-byte aligned)";
  const int m_blocks = lab_cdiv(a->seqlen_q, C::BM);
  dim3 grid(m_blocks, bh);
  if constexpr (Sched::kPersistent) {
    // A flat grid of the CTAs the GPU holds at once, each looping over the tile list.
    if ((long long)m_blocks * bh > 0x7fffffffLL) return "too many query blocks for one launch";
    static int ctas_by_device[64] = {};  // once per instantiation and device
    const int units = Sched::kDynamic ? m_blocks * bh : lab_hopper_sched::persistent_units_per_head(m_blocks, CAUSAL) * bh;
    const int ctas = lab_hopper_sched::persistent_ctas(kernel, C::kThreads, C::kSmemBytes, units, ctas_by_device);
    if (ctas <= 0) return "the persistent kernel fits no CTA on an SM of this GPU (occupancy 0)";
    grid = dim3(ctas);
  } else if (CAUSAL) {
    if ((long long)m_blocks * bh > 0x7fffffffLL) return "too many query blocks for one launch";
    grid = dim3(m_blocks * bh);
  } else if (bh > 65535) {
    return "batch*heads must be <= 65535 (grid y limit)";
  }
  const float scale_log2 = a->softmax_scale * 1.4426950408889634f;  // exp(x) = 2^(x log2 e)
  if constexpr (Sched::kDynamic) {
    CUtensorMap tm_o = tm_q;  // unused unless StoresOByTma<C>
    if (kOTma && !lab_tma_map_3d<T>(&tm_o, a->o, C::D, a->seqlen_q, bh, 64))
      return "cuTensorMapEncodeTiled refused O's tensor map (o must be contiguous and 16-byte aligned)";
    // The counter starts at zero each launch: the lab's zeroed counters for the stream (common.cuh; the kernel's last
    // CTA leaves them zero; a captured call's own), or else the call's workspace, zeroed on the stream.
    int* counter = static_cast<int*>(a->counters);
    if (counter == nullptr) {
      counter = static_cast<int*>(a->workspace);
      const cudaError_t zeroed = cudaMemsetAsync(counter, 0, workspace_bytes<Sched>(), stream);
      if (zeroed != cudaSuccess) return cudaGetErrorString(zeroed);
    }
    kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, static_cast<T*>(a->o), a->seqlen_q,
                                                         a->seqlen_k, bh, scale_log2, a->lse, kv_group, counter);
  } else if constexpr (kOTma) {
    CUtensorMap tm_o;  // a consumer warpgroup's 64 rows, in boxes of 64 columns
    if (!lab_tma_map_3d<T>(&tm_o, a->o, C::D, a->seqlen_q, bh, 64))
      return "cuTensorMapEncodeTiled refused O's tensor map (o must be contiguous and 16-byte aligned)";
    kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, static_cast<T*>(a->o), a->seqlen_q,
                                                         a->seqlen_k, bh, scale_log2, a->lse, kv_group);
  } else {
    kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, static_cast<T*>(a->o), a->seqlen_q,
                                                         a->seqlen_k, bh, scale_log2, a->lse, kv_group);
  }
  return lab_last_launch_error();
}

// K and V with as many heads as Q: the kernel as it always was; fewer (GQA): its GQA instantiation.
template <class C, typename T, bool CAUSAL, bool WRITE_LSE = false, class Sched = lab_hopper_sched::OneTilePerCta>
const char* launch_one(const LabAttentionArgs* a, cudaStream_t stream) {
  if (a->heads_kv < 1 || a->heads % a->heads_kv != 0) return "heads_kv must divide heads (GQA)";
  return a->heads_kv == a->heads ? launch_kernel<C, T, CAUSAL, WRITE_LSE, Sched, false>(a, stream)
                                 : launch_kernel<C, T, CAUSAL, WRITE_LSE, Sched, true>(a, stream);
}

template <class C, bool CAUSAL, bool WRITE_LSE = false, class Sched = lab_hopper_sched::OneTilePerCta>
const char* launch(const LabAttentionArgs* a, cudaStream_t stream) {
  switch (a->dtype) {
    case LAB_FLOAT16: return launch_one<C, __half, CAUSAL, WRITE_LSE, Sched>(a, stream);
    case LAB_BFLOAT16: return launch_one<C, __nv_bfloat16, CAUSAL, WRITE_LSE, Sched>(a, stream);
    default: return "float16 and bfloat16 only (a wgmma rung); use --dtype float16";
  }
}

}  // namespace lab_hopper_fwd
