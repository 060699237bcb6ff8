"""The Hopper forward's tile schedulers (kernels/hopper/tile_scheduler.cuh), walked on the CPU.

A host program compiled by nvcc from the header itself (no GPU) walks every CTA of a persistent grid
through its rounds exactly as hopper/fwd_wgmma.cuh's producer and consumers do, for the
FlashAttention grid's problems and ragged ones: every tile (query block x batch*head) must be
computed exactly once, whatever the grid (1 CTA, fewer CTAs than tiles, more), causal or not. And the balance the header claims for the
reversing stride over a longest-first list: no CTA's work (its key tiles) above the mean by more
than one longest tile (list scheduling's bound), where the plain stride's grows with the rounds.
Skips without nvcc.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import pytest

from conftest import REPO

DRIVER = textwrap.dedent(r"""
    #include "hopper/tile_scheduler.cuh"
    #include <cstdio>
    #include <cstdlib>
    #include <vector>
    using namespace lab_hopper_sched;

    // A CTA's walk as fwd_wgmma.cuh's: round 0 at index_of(0), then until index_of(round) < 0.
    // Work of a tile: its key tiles (the kernel's tile_key_tiles()).
    int main(int argc, char** argv) {
      const int nq = atoi(argv[1]), nk = atoi(argv[2]), bm = atoi(argv[3]), bn = atoi(argv[4]);
      const int bh = atoi(argv[5]), grid_asked = atoi(argv[6]), causal = atoi(argv[7]);
      const int snake = atoi(argv[8]);
      const int m_blocks = (nq + bm - 1) / bm, total = m_blocks * bh;
      const int grid = grid_asked < total ? grid_asked : total;  // the launcher's clamp
      std::vector<int> seen(total, 0);
      long long max_work = 0, sum_work = 0, longest = 0;
      for (int b = 0; b < grid; ++b) {
        long long work = 0;
        for (int round = 0;; ++round) {
          // snake = 0: the plain stride round * grid + b, for comparison.
          const int i = snake ? Persistent::index_of(round, total, grid, b)
                              : (round * grid + b < total ? round * grid + b : -1);
          if (i < 0) break;
          const Tile t = persistent_order(i, m_blocks, bh, causal);
          if (t.m_block < 0 || t.m_block >= m_blocks || t.bh < 0 || t.bh >= bh) { printf("out of range %d\n", i); return 1; }
          ++seen[t.bh * m_blocks + t.m_block];
          const int m0 = t.m_block * bm;
          const int rows_end = nq < m0 + bm ? nq : m0 + bm;
          const int keys = causal ? (nk < rows_end ? nk : rows_end) : nk;
          const int w = (keys + bn - 1) / bn;
          work += w;
          longest = w > longest ? w : longest;
        }
        max_work = work > max_work ? work : max_work;
        sum_work += work;
      }
      int missing = 0, twice = 0;
      for (int s : seen) { missing += s == 0; twice += s > 1; }
      printf("%d %d %lld %lld %lld %d\n", missing, twice, max_work, sum_work, longest, grid);
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
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found: the scheduler is walked by a host program compiled from its header")
    d = tmp_path_factory.mktemp("sched")
    (d / "walk.cu").write_text(DRIVER)
    exe = d / "walk"
    res = subprocess.run([nvcc, "-std=c++17", "-O1", "-I", str(REPO / "kernels"), "-o", str(exe), str(d / "walk.cu")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return exe


def _walk(exe, case, snake=1):
    out = subprocess.run([str(exe), *map(str, case), str(snake)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return tuple(map(int, out.stdout.split()))  # missing, twice, max work, total work, longest tile, grid


@pytest.mark.parametrize("case", CASES, ids=lambda c: "nq{}-nk{}-BM{}-BN{}-bh{}-grid{}-{}".format(
    *c[:6], "causal" if c[6] else "full"))
def test_every_tile_is_computed_exactly_once_and_the_ctas_are_balanced(walker, case):
    missing, twice, max_work, sum_work, longest, grid = _walk(walker, case)
    assert (missing, twice) == (0, 0)
    assert max_work <= sum_work / grid + longest, (max_work, sum_work / grid, longest)


def test_the_reversing_stride_beats_the_plain_one_on_a_long_causal_list(walker):
    # N = 16384 causal at D = 64: 8,192 tiles of 1..128 key tiles over 264 CTAs, 31 rounds.
    case = CASES[4]
    _, _, snake_max, total, _, _ = _walk(walker, case, snake=1)
    _, _, plain_max, _, _, _ = _walk(walker, case, snake=0)
    mean = total / case[5]
    assert snake_max < plain_max and snake_max - mean < (plain_max - mean) / 4, (snake_max, plain_max, mean)
