"""The Hopper forward's tile schedulers (kernels/hopper/tile_scheduler.cuh), walked on the CPU.

A host program compiled by nvcc from the header itself (no GPU) walks every CTA of a persistent grid
through its steps exactly as hopper/fwd_wgmma.cuh's producer and consumers do, for the
FlashAttention grid's problems and ragged ones: every tile (query block x batch*head) must be
computed exactly once, whatever the grid (1 CTA, fewer CTAs than units, more), causal or not. And
the balance the header claims for its units of equal work (causal: a head's query blocks m-1-p and
p together): no CTA's work (its key tiles) above the mean by more than one unit.
Skips without nvcc.
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from conftest import host_program

DRIVER = textwrap.dedent(r"""
    #include "hopper/tile_scheduler.cuh"
    #include <cstdio>
    #include <algorithm>
    #include <cstdlib>
    #include <vector>
    using namespace lab_hopper_sched;

    // Every CTA's walk as fwd_wgmma.cuh's next_tile(): steps from 0 until kWalkDone, kWalkSkip
    // steps taken without a tile. Work of a tile: its key tiles (key_tiles(), the kernel's count).
    // order = 1: the persistent walk; order = 0: a plain stride over one longest-first list of all
    // heads (causal_lpt with one group), for comparison.
    // order = 2: the dynamic longest-first list (LongestFirst), each CTA starting on its own index and
    // taking the counter's next each time it starts a tile (a tile lasting its key tiles plus one for its start and
    // epilogue), for head dim argv[9], so that it holds argv[10] taken indices beyond the tile it computes
    // (fwd_wgmma.cuh's producer holds one: it takes the next as it loads a tile's Q; step 20 tried two and a late
    // one, 4261339). Its first ones are its own index plus multiples of the grid.
    int dynamic(int nq, int nk, int bm, int bn, int bh, int grid_asked, int causal, int d, int ahead) {
      const int m_blocks = (nq + bm - 1) / bm;
      const long long total = LongestFirst::tiles(m_blocks, bh);
      const int grid = grid_asked < total ? grid_asked : (int)total;  // the launcher's clamp
      const int section = std::min(LongestFirst::section_heads(nk, d), bh);
      std::vector<int> seen(total, 0);
      std::vector<long long> busy(grid, 0), work(grid, 0);  // when each CTA is next free; its key tiles
      long long longest = 0, next = (long long)(ahead + 1) * grid;
      auto take = [&](int b, long long index) {
        const Tile t = LongestFirst::tile_of(index, m_blocks, bh, causal, section);
        if (t.m_block == kWalkDone) return false;
        if (t.m_block < 0 || t.m_block >= m_blocks || t.bh < 0 || t.bh >= bh) { printf("out of range\n"); exit(1); }
        ++seen[(long long)t.bh * m_blocks + t.m_block];
        const int w = key_tiles(t.m_block * bm, bm, bn, nq, nk, causal);
        work[b] += w;
        busy[b] += w + 1;
        longest = w > longest ? w : longest;
        return true;
      };
      std::vector<std::vector<long long>> held(grid);  // each CTA's taken indices, in order
      for (int b = 0; b < grid; ++b) {
        take(b, b);
        for (int a = 1; a <= ahead; ++a) held[b].push_back(b + (long long)a * grid);
      }
      const long long kDone = 1ll << 62;
      for (;;) {
        const int b = (int)(std::min_element(busy.begin(), busy.end()) - busy.begin());
        if (busy[b] == kDone) break;
        long long index = next;  // ahead 0 (a model only): the index taken as the CTA frees up
        if (ahead > 0) {
          index = held[b].front();
          held[b].erase(held[b].begin());
        }
        if (!take(b, index)) { busy[b] = kDone; continue; }
        if (ahead > 0) held[b].push_back(next);
        ++next;
      }
      long long max_work = 0, sum_work = 0;
      for (int b = 0; b < grid; ++b) { max_work = std::max(max_work, work[b]); sum_work += work[b]; }
      int missing = 0, twice = 0;
      for (int s : seen) { missing += s == 0; twice += s > 1; }
      printf("%d %d %lld %lld %lld %d\n", missing, twice, max_work, sum_work, longest, grid);
      return 0;
    }

    int main(int argc, char** argv) {
      const int nq = atoi(argv[1]), nk = atoi(argv[2]), bm = atoi(argv[3]), bn = atoi(argv[4]);
      const int bh = atoi(argv[5]), grid_asked = atoi(argv[6]), causal = atoi(argv[7]), order = atoi(argv[8]);
      if (order == 2) return dynamic(nq, nk, bm, bn, bh, grid_asked, causal, atoi(argv[9]), atoi(argv[10]));
      const int m_blocks = (nq + bm - 1) / bm, total = m_blocks * bh;
      const int units = order ? persistent_units_per_head(m_blocks, causal) * bh : total;
      const int grid = grid_asked < units ? grid_asked : units;  // the launcher's clamp
      std::vector<int> seen(total, 0);
      long long max_work = 0, sum_work = 0, longest_unit = 0;
      for (int b = 0; b < grid; ++b) {
        long long work = 0, unit_work = 0;
        for (int step = 0;; ++step) {
          Tile t;
          if (order) {
            t = Persistent::step_tile(step, m_blocks, bh, causal, grid, b);
          } else {
            const int i = step * grid + b;
            t = i < total ? causal_lpt(i, m_blocks, bh, bh) : Tile{kWalkDone, 0};
          }
          if (!order || !causal || (step & 1) == 0) unit_work = 0;  // a new unit starts
          if (t.m_block == kWalkDone) break;
          if (t.m_block == kWalkSkip) continue;
          if (t.m_block < 0 || t.m_block >= m_blocks || t.bh < 0 || t.bh >= bh) { printf("out of range\n"); return 1; }
          ++seen[t.bh * m_blocks + t.m_block];
          const int w = key_tiles(t.m_block * bm, bm, bn, nq, nk, causal);  // the kernel's count
          work += w;
          unit_work += w;
          longest_unit = unit_work > longest_unit ? unit_work : longest_unit;
        }
        max_work = work > max_work ? work : max_work;
        sum_work += work;
      }
      int missing = 0, twice = 0;
      for (int s : seen) { missing += s == 0; twice += s > 1; }
      printf("%d %d %lld %lld %lld %d\n", missing, twice, max_work, sum_work, longest_unit, grid);
      return 0;
    }
""")


# (nq, nk, BM, BN, batch*heads, grid, causal): the fa-grid's weakest cells on an H100's
# persistent grid (264 CTAs at D=64, 132 at D=128), ragged and odd ones, tiny and oversized grids.
CASES = [
    (512, 512, 64, 128, 32 * 32, 264, 1),
    (512, 512, 128, 128, 32 * 16, 132, 1),
    (1024, 1024, 64, 128, 16 * 32, 264, 1),
    (1024, 1024, 128, 128, 16 * 16, 132, 1),
    (16384, 16384, 64, 128, 32, 264, 1),
    (16384, 16384, 128, 128, 16, 132, 1),
    (512, 512, 128, 128, 32 * 16, 132, 0),
    (8192, 8192, 192, 128, 2 * 32, 132, 0),
    (300, 300, 64, 128, 8 * 40, 264, 1),
    (257, 129, 128, 128, 4 * 33, 132, 1),
    (1, 239, 128, 128, 6 * 70, 132, 1),
    (1023, 1024, 64, 128, 3 * 47, 264, 1),
    (63, 65, 64, 128, 1, 1, 1),
    (1000, 777, 128, 128, 2 * 17, 7, 1),
    (4097, 4097, 64, 128, 70, 264, 0),
]


@pytest.fixture(scope="module")
def walker(tmp_path_factory):
    return host_program(tmp_path_factory, DRIVER, "the scheduler is walked by a host program compiled from its header")


def _walk(exe, case, order=1, head_dim=64, ahead=1):
    out = subprocess.run([str(exe), *map(str, case), str(order), str(head_dim), str(ahead)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return tuple(map(int, out.stdout.split()))  # missing, twice, max work, total work, longest unit, grid


@pytest.mark.parametrize("case", CASES, ids=lambda c: "nq{}-nk{}-BM{}-BN{}-bh{}-grid{}-{}".format(
    *c[:6], "causal" if c[6] else "full"))
def test_every_tile_is_computed_exactly_once_and_the_ctas_are_balanced(walker, case):
    missing, twice, max_work, sum_work, longest_unit, grid = _walk(walker, case)
    assert (missing, twice) == (0, 0)
    assert max_work <= sum_work / grid + longest_unit, (max_work, sum_work / grid, longest_unit)


def test_a_causal_unit_is_a_head_s_heavy_and_light_block_of_equal_total_work(walker):
    # N = 512 causal at D = 64 (BM 64, BN 128): blocks of 1, 1, 2, 2, 3, 3, 4, 4 key tiles pair
    # into units of 5, so 4,096 units over 264 CTAs: 15 or 16 units, 75 or 80 key tiles each.
    missing, twice, max_work, sum_work, longest_unit, grid = _walk(walker, CASES[0])
    assert (missing, twice, longest_unit, grid) == (0, 0, 5, 264)
    assert max_work == 80 and sum_work == 1024 * 20


def test_the_walk_is_balanced_where_a_static_stride_over_grouped_ranks_is_not(walker):
    # N = 512 causal at D = 128: 512 heads; a static stride over one longest-first list balances
    # work too, but reads each head's K and V once per rank (the header's L2 argument); the
    # persistent walk must stay as balanced as that list.
    _, _, walk_max, total, _, grid = _walk(walker, CASES[1], order=1)
    _, _, list_max, _, _, _ = _walk(walker, CASES[1], order=0)
    assert walk_max <= list_max and walk_max <= 1.04 * total / grid, (walk_max, list_max, total / grid)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "nq{}-nk{}-BM{}-BN{}-bh{}-grid{}-{}".format(
    *c[:6], "causal" if c[6] else "full"))
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("ahead", [1, 2])
def test_the_dynamic_longest_first_list_computes_every_tile_once_and_ends_balanced(walker, case, head_dim, ahead):
    """LongestFirst (step 19; and step 20's two ahead, retired): each CTA's first tile is its own index, then the
    counter's next, taken one or two tiles ahead; list scheduling ends within one tile of the mean per index held
    ahead (a CTA may hold tiles another, idle, would have taken), and the list ends on the shortest tiles."""
    missing, twice, max_work, sum_work, longest, grid = _walk(walker, case, order=2, head_dim=head_dim, ahead=ahead)
    assert (missing, twice) == (0, 0)
    assert max_work <= sum_work / grid + ahead * longest, (max_work, sum_work / grid, longest)


@pytest.mark.parametrize("case, static_excess", [
    ((1024, 1024, 128, 128, 16 * 32, 132, 1), 1.03),   # the fa-grid's D=64 causal 1024 on the ping-pong (2,048 pairs)
    ((2048, 2048, 64, 128, 8 * 32, 264, 1), 1.03),     # D=64 causal 2048, one warpgroup, two CTAs an SM
])
def test_longest_first_ends_where_the_static_walk_leaves_its_last_round_part_empty(walker, case, static_excess):
    """Step 19's premise on the CPU: units of equal work whose count is not a multiple of the grid leave the
    static walk's busiest CTA about 3% over the mean; the longest-first list, each index taken a tile ahead, ends
    within 1% of it where a CTA has 16 or more tiles."""
    _, _, static_max, total, _, grid = _walk(walker, case, order=1)
    assert static_max >= static_excess * total / grid, (static_max, total / grid)
    _, _, dynamic_max, total_d, _, _ = _walk(walker, case, order=2, ahead=1)
    assert total_d == total and dynamic_max <= 1.01 * total / grid, (dynamic_max, total / grid)


@pytest.mark.parametrize("case, head_dim", [
    ((1024, 1024, 128, 128, 8 * 16, 132, 1), 128),    # D=128 causal 1024 (the 32-head half of step 19's probe): 7.8 tiles a CTA
    ((1024, 1024, 128, 128, 16 * 16, 132, 1), 128),   # the fa-grid's D=128 causal 1024: 15.5
    ((1024, 1024, 128, 128, 16 * 32, 132, 1), 64),    # the fa-grid's D=64 causal 1024 on the ping-pong: 31
])
def test_the_longer_a_cta_holds_its_next_index_the_less_balanced_the_walk_ends(walker, case, head_dim):
    """Step 20's premise: a CTA holding the index of its next tile holds work a CTA idle sooner would have taken. With
    few tiles a CTA (D=128 causal 1024), a tile ahead (step 19) ends no better than the static walk, two ahead worse,
    and taking it as the CTA frees up (ahead 0, a model only) best. Step 20 measured the first two as predicted (two ahead
    0.975x a tile ahead at 16,16,1024,128 causal); a walk taking it late (with a tile's third last K/V stage), aimed
    between, did not win either (0.995x; v9_notes "Step 20")."""
    _, _, static_max, total, _, grid = _walk(walker, case, order=1)
    ends = [_walk(walker, case, order=2, head_dim=head_dim, ahead=a)[2] for a in (0, 1, 2)]
    assert ends[0] <= ends[1] <= ends[2] and ends[0] < ends[2], ends
    assert ends[0] < static_max or case[4] < 16 * 16, (ends, static_max)
