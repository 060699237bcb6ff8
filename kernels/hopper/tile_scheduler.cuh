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
// The tile list's order. Causal problems longest-processing-time first, so the short tiles fill
// the tail: one CTA per tile (v5's, v6's order) within groups of 32 heads for L2 reuse (every
// head's heaviest query block, then the next heaviest...: the hardware hands the next CTA to
// whichever SM frees first); persistent over all heads at once, a list that never grows longer,
// because a static walk over grouped lists puts the same rank under the same CTA every round
// (tests/test_tile_scheduler.py: at N = 512 causal D = 128, 512 heads in 16 groups over 132 CTAs,
// the busiest CTA had 1.44x the mean work). Non-causal problems query block fastest (the CTAs of
// one wave share a head's K and V in L2). The persistent walk reverses direction every other round
// (CTA b takes tile r*G + b in even rounds, r*G + G-1-b in odd ones, G CTAs), so the CTA that got
// a round's longest tile gets the next round's shortest: over a non-increasing list no CTA's work
// exceeds the mean by more than one tile (the plain stride's excess grows with the rounds).
#pragma once

#include "../common.cuh"

namespace lab_hopper_sched {

struct Tile {
  int m_block;  // query block: rows m_block * BM ..
  int bh;       // batch * heads index
};

// Causal longest-processing-time order: index -> tile, within groups of `head_group` heads. The
// index is unsigned (blockIdx.x's type: v6's divisions, and cheaper than signed ones).
// Host and device: tests/test_tile_scheduler.py walks it on the CPU.
static __host__ __device__ __forceinline__ Tile causal_lpt(unsigned index, int m_blocks, int bh_total, int head_group) {
  const int group = index / (m_blocks * head_group);
  const int within = index - group * m_blocks * head_group;
  const int rest = bh_total - group * head_group;
  const int heads = head_group < rest ? head_group : rest;
  const int rank = within / heads;
  return {m_blocks - 1 - rank, group * head_group + (within - rank * heads)};
}

// The persistent walk's list: index -> tile (the header's order).
static __host__ __device__ __forceinline__ Tile persistent_order(unsigned index, int m_blocks, int bh_total, bool causal) {
  if (causal) return causal_lpt(index, m_blocks, bh_total, bh_total);  // one group: all heads
  return {int(index % unsigned(m_blocks)), int(index / unsigned(m_blocks))};
}

// v6's: one CTA per tile; causal grids are flat (blockIdx.x walks the longest-first list),
// non-causal ones are [query blocks, batch*heads].
struct OneTilePerCta {
  static constexpr bool kPersistent = false;
  // The tile is the CTA's own (blockIdx); there is no later round.
  static __device__ __forceinline__ int index(int, int) { return -1; }
};

// v9's: a persistent grid walking the list with a reversing static stride (the header above).
struct Persistent {
  static constexpr bool kPersistent = true;
  // This CTA's tile of round `round`, or -1 when it has none (and none later: every index of round
  // r+1 is above every index of round r).
  static __host__ __device__ __forceinline__ int index_of(int round, int total, int g, int b) {
    const int i = round * g + ((round & 1) ? g - 1 - b : b);
    return i < total ? i : -1;
  }
  static __device__ __forceinline__ int index(int round, int total) {
    return index_of(round, total, gridDim.x, blockIdx.x);
  }
};

// Host: the persistent grid's size, the CTAs of `kernel` the current GPU holds at once (its SM
// count x the occupancy calculator's CTAs per SM), at most `tiles`. `cache` is the caller's
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
