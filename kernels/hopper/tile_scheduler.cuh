// Flash Lab, Hopper machinery (sm_90a): tile schedulers for the forward. Which tile (a block of
// query rows of one batch*head) each CTA computes, in what order, and how many CTAs the launch has.
// hopper/fwd_wgmma.cuh takes one as a template argument:
//
//   OneTilePerCta (v6): the grid is the tile list, one CTA per tile. Each CTA pays its own prologue
//     (barrier init, setmaxnreg, the Q load's latency) and epilogue, hidden only where a second CTA
//     of the same SM is in its main loop.
//   Persistent (v9): as many CTAs as the GPU holds at once (SMs x CTAs per SM); each walks the tile
//     list with a static stride, so the producer loads the next tile's Q and first K/V tiles while
//     the consumers finish the previous tile (its last P V and its epilogue), and the prologue is
//     paid once per CTA instead of once per tile.
//
// The persistent walk's order. A static walk cannot rely on the hardware's first-free-SM hand-out
// that balances v6's causal grid (tiles of 1..N/BN key tiles, longest first in groups of 32
// heads); walked statically, grouped lists put the same rank under the same CTA every round
// (tests/test_tile_scheduler.py: the busiest CTA had 1.44x the mean work at N = 512 causal
// D = 128, 512 heads, 132 CTAs), and one longest-first list over all heads visits each head's K
// and V once per rank, far apart in time: at N = 512 causal D = 64 (1,024 heads, 128 MiB of K and
// V against a 50 MB L2) up to 4.9x the unique bytes from HBM. So the persistent walk hands out
// units of equal work, head by head: causal, a unit is the pair of query blocks (m-1-p, p) of one
// head (their key tiles sum to the same count for every p: the heavy one first, then the light
// one; the middle block of an odd count is a unit alone); non-causal, a unit is one tile, query
// block fastest. G consecutive units cover G/(units per head) heads, whose K and V stay in L2.
// CTA b takes unit r*G + b in even rounds and r*G + G-1-b in odd ones (G CTAs): where units are
// not equal (Nk < Nq, a ragged last block) the CTA that got a round's longest gets the next
// round's shortest.
#pragma once

#include "../common.cuh"

namespace lab_hopper_sched {

struct Tile {
  int m_block;  // query block: rows m_block * BM .. (or kWalkDone / kWalkSkip below)
  int bh;       // batch * heads index
};
// A walk step's m_block when the CTA has no tile left, or none at this step (the unpaired middle
// block's missing partner).
constexpr int kWalkDone = -2, kWalkSkip = -1;

// v6's causal order (one CTA per tile): index -> tile, longest-processing-time first within groups
// of `head_group` heads. (fwd_wgmma.cuh keeps v6's own statements inline; this is their record,
// and the CPU walk's.)
static __host__ __device__ __forceinline__ Tile causal_lpt(unsigned index, int m_blocks, int bh_total, int head_group) {
  const int group = index / (m_blocks * head_group);
  const int within = index - group * m_blocks * head_group;
  const int rest = bh_total - group * head_group;
  const int heads = head_group < rest ? head_group : rest;
  const int rank = within / heads;
  return {m_blocks - 1 - rank, group * head_group + (within - rank * heads)};
}

// The persistent walk's units (the header's order): causal, ceil(m_blocks / 2) pairs per head.
static __host__ __device__ __forceinline__ int persistent_units_per_head(int m_blocks, bool causal) {
  return causal ? (m_blocks + 1) / 2 : m_blocks;
}

// The key tiles (of BN keys) a query block of BM rows from row m0 reads: every key, or causal (top-left
// aligned, key j seen by rows i >= j) those up to its last row. fwd_wgmma.cuh's producer loads this
// many K/V tiles per tile and its consumers wait for as many, so both count with this one function;
// the CPU tests (tests/test_tile_scheduler.py, tests/test_fwd_pipeline_model.py) walk it too.
static __host__ __device__ __forceinline__ int key_tiles(int m0, int bm, int bn, int nq, int nk, bool causal) {
  return lab_cdiv(causal ? min(nk, min(nq, m0 + bm)) : nk, bn);
}

// v6's: one CTA per tile; causal grids are flat (blockIdx.x walks the longest-first list),
// non-causal ones are [query blocks, batch*heads].
struct OneTilePerCta {
  static constexpr bool kPersistent = false;
  static constexpr bool kDynamic = false;
  // The tile is the CTA's own (blockIdx); there is no later step.
  static __device__ __forceinline__ Tile step_tile(int, int, int, bool) { return {kWalkDone, 0}; }
};

// v9's: a persistent grid walking the units (the header's order). A CTA's walk is a sequence of
// steps: causal, two per unit (its heavy block, then its light one), else one.
struct Persistent {
  static constexpr bool kPersistent = true;
  static constexpr bool kDynamic = false;
  // The unit of round `round` for CTA b of g, or -1 when there is none (and none later: every unit
  // of round r+1 is above every unit of round r).
  static __host__ __device__ __forceinline__ int unit_of(int round, int units, int g, int b) {
    const int i = round * g + ((round & 1) ? g - 1 - b : b);
    return i < units ? i : -1;
  }
  // CTA b's tile at walk step `step`: m_block kWalkDone past its last unit, kWalkSkip for the
  // missing partner of an odd count's middle block.
  static __host__ __device__ __forceinline__ Tile step_tile(int step, int m_blocks, int bh_total, bool causal, int g,
                                                            int b) {
    const int per_head = persistent_units_per_head(m_blocks, causal);
    const int u = unit_of(causal ? step >> 1 : step, per_head * bh_total, g, b);
    if (u < 0) return {kWalkDone, 0};
    const int bh = u / per_head, p = u - bh * per_head;
    if (!causal) return {p, bh};
    const int heavy = m_blocks - 1 - p;
    if ((step & 1) == 0) return {heavy, bh};
    return {heavy == p ? kWalkSkip : p, bh};
  }
  static __device__ __forceinline__ Tile step_tile(int step, int m_blocks, int bh_total, bool causal) {
    return step_tile(step, m_blocks, bh_total, causal, gridDim.x, blockIdx.x);
  }
};

// v9 step 19's: a persistent grid handing tiles out in order of a counter, longest first. The static walk above leaves
// the last round partly empty: its units are equal, but their count is rarely a multiple of the grid (the fa-grid's
// 16,32,1024,64 causal: 2,048 pairs on 132 CTAs, 15.5 rounds, so the busiest CTA has 3.1% more work than the mean; with
// 33 heads, whole rounds, v9 took 1.003x the time of 32 heads where cuDNN took 1.028x: v9_notes, "Step 19"). Here every
// CTA starts on tile blockIdx.x and then takes the next index of a counter in global memory (the producer thread's
// atomicAdd as it loads a tile's Q; fwd_wgmma.cuh hands the consumers its index, or for a HandsTile kernel the tile
// itself, with its Q), so a CTA that finishes early takes more, and the list ends on the shortest tiles. A CTA holds
// its next index for a whole tile, which costs balance where a CTA has few tiles: the CPU walk
// (tests/test_tile_scheduler.py) ends 16,16,1024,128 causal 3.1% over the mean, as the static walk (v9_notes, "Step
// 20"). The list (FlashAttention-3's longest-processing-time order in sections sized for L2): heads in sections whose K
// and V fit in kL2SectionBytes, each section's tiles longest first (causal_lpt over the section's heads: every head's
// last query block, then the one before, ...), so a section's K and V are read from HBM about once (at 16,32,1024,64
// causal ncu saw 243 MB read for Q, K and V's 201 MB: Q and O pass through the same L2; v9 step 22); non-causal tiles
// are equal, query block fastest. The counter is common.cuh's zeroed counters (one set a stream, or a captured call's
// own; the launch's last CTA leaves it zero), or else the launch's workspace, zeroed on the stream before it: so calls
// on other streams and other captured graphs never share it.
struct LongestFirst {
  static constexpr bool kPersistent = true;
  static constexpr bool kDynamic = true;
  static constexpr long long kL2SectionBytes = 32ll << 20;  // FlashAttention-3's budget: under the H100's 50 MB L2
  // Heads per section: as many as have K and V (16-bit) in the budget, at least one.
  static __host__ __device__ __forceinline__ int section_heads(int nk, int d) {
    const long long per_head = 4ll * nk * d;
    const long long heads = kL2SectionBytes / (per_head > 0 ? per_head : 1);
    return heads < 1 ? 1 : heads > (1 << 30) ? (1 << 30) : (int)heads;
  }
  static __host__ __device__ __forceinline__ long long tiles(int m_blocks, int bh_total) {
    return (long long)m_blocks * bh_total;
  }
  // The tile at list position `index` (kWalkDone past the end).
  static __host__ __device__ __forceinline__ Tile tile_of(long long index, int m_blocks, int bh_total, bool causal,
                                                          int section) {
    if (index < 0 || index >= tiles(m_blocks, bh_total)) return {kWalkDone, 0};
    const unsigned i = (unsigned)index;  // < 2^31: the launcher refuses more tiles
    if (!causal) return {(int)(i % m_blocks), (int)(i / m_blocks)};
    return causal_lpt(i, m_blocks, bh_total, section);
  }
};

// Host: the persistent grid's size, the CTAs of `kernel` the current GPU holds at once (its SM
// count x the occupancy calculator's CTAs per SM), at most `tiles` (the walk's units). `cache` is the caller's
// per-instantiation memo (one entry per device ordinal, 0 = not yet asked), so that a launch does
// not query the driver each time. Returns 0 when the kernel does not fit on an SM at all.
template <class Kernel>
static inline int persistent_ctas(Kernel kernel, int threads, int smem_bytes, int tiles, int (&cache)[64]) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  int ctas = dev < 64 ? cache[dev] : 0;
  if (ctas == 0) {
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes) != cudaSuccess)
      return 0;
    ctas = sms * per_sm;
    if (dev < 64) cache[dev] = ctas;
  }
  return ctas < tiles ? ctas : tiles;
}

}  // namespace lab_hopper_sched
