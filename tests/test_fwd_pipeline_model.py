"""The Hopper forward's barrier protocol (kernels/hopper/fwd_wgmma.cuh), replayed on the CPU.

v9's persistent forward hung on its first GPU run (H200, 2026-11-26) on every shape where a CTA took
a second tile: the consumers never handed the tile's last V stage back (v_empty), so the producer,
refilling that stage for the next tile, waited on a phase nobody would complete. No GPU is needed to
see it: this file replays the CTA's protocol with

* mbarriers as the PTX ISA defines them: an arrival count and transaction bytes per phase, the phase
  completing when both reach zero, try_wait.parity(P) passing once the current phase's parity is not
  P (a fresh barrier passes parity 1);
* named barriers (ping-pong's turns) as thread counters: bar.arrive adds its threads and goes on,
  bar.sync adds them and waits for the generation to complete, whoever's threads completed it;
* TMA copies as agents of their own that land at any later moment (they check that no warpgroup
  still reads the buffer and tag it with the tile and key tile they carry);
* the producer thread and each consumer warpgroup running fwd_wgmma.cuh's sequence of waits,
  arrivals, copies and operand reads, transcribed statement for statement below (a change to the
  kernel's protocol must change `producer` and `consumer` with it), each side keeping its own round
  and ring position as the kernel does;
* the CTAs' tile walks from the header itself: a host program compiled by nvcc prints each CTA's
  (query block, batch*head, key tiles) from Persistent::step_tile and key_tiles, as the kernel's
  advance() calls them.

A random interleaving of the agents runs until all are done. The checks: no deadlock (an agent not
done and none able to move), every operand read finds the tile and key tile the reader expects (a
parity that lets a wait pass on the wrong phase shows here), no copy lands in a buffer still read,
each warpgroup reads every K and V tile the producer loads, once, in order, and the barriers end
balanced; and each role has as many barrier sites as the kernel's (a drift alarm). The protocol
before the fix, replayed the same way, deadlocks at a CTA's second tile and never at its first (what
the GPU showed); the ping-pong turns re-armed per tile can deadlock too. The replays skip without
nvcc (the walks are compiled from the header).
"""

from __future__ import annotations

import inspect
import random
import re
import subprocess
import textwrap
from dataclasses import dataclass

import pytest

from conftest import REPO, host_program

WALK = textwrap.dedent(r"""
    #include "hopper/tile_scheduler.cuh"
    #include <cstdio>
    #include <cstdlib>
    using namespace lab_hopper_sched;

    // One line per CTA of a persistent grid: its tiles as fwd_wgmma.cuh's roles visit them (step 0,
    // then advance(): ++step, kWalkSkip steps passed over, kWalkDone ends), "m_block,bh,key_tiles;".
    int main(int argc, char** argv) {
      const int nq = atoi(argv[1]), nk = atoi(argv[2]), bm = atoi(argv[3]), bn = atoi(argv[4]);
      const int bh = atoi(argv[5]), grid_asked = atoi(argv[6]), causal = atoi(argv[7]);
      const int m_blocks = (nq + bm - 1) / bm;
      const int units = persistent_units_per_head(m_blocks, causal) * bh;
      const int grid = grid_asked < units ? grid_asked : units;  // the launcher's clamp
      for (int b = 0; b < grid; ++b) {
        for (int step = 0;; ++step) {
          const Tile t = Persistent::step_tile(step, m_blocks, bh, causal, grid, b);
          if (t.m_block == kWalkDone) break;
          if (t.m_block == kWalkSkip) continue;
          printf("%d,%d,%d;", t.m_block, t.bh, key_tiles(t.m_block * bm, bm, bn, nq, nk, causal));
        }
        printf("\n");
      }
      return 0;
    }
""")

CONSUMER_THREADS_PER_WG = 128


class Hazard(AssertionError):
    """The protocol let something happen that the hardware would get wrong."""


class Deadlock(AssertionError):
    """Some agent is not done and none can move."""


class MBarrier:
    def __init__(self, name: str, count: int):
        self.name, self.count = name, count
        self.pending, self.tx, self.phase = count, 0, 0  # phase: phases completed so far

    def arrive(self, threads: int, tx: int = 0):
        self.tx += tx  # arrive.expect_tx: the bytes are announced before the arrival counts
        self.pending -= threads
        if self.pending < 0:
            raise Hazard(f"{self.name}: more arrivals than its count ({self.count}) in phase {self.phase}")
        self._complete()

    def complete_tx(self, nbytes: int):
        self.tx -= nbytes
        if self.tx < 0:
            raise Hazard(f"{self.name}: a copy delivered bytes no arrival announced (phase {self.phase})")
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity: int) -> bool:
        return (self.phase & 1) != parity  # mbarrier.try_wait.parity

    def balanced(self) -> bool:
        return self.pending == self.count and self.tx == 0


class NamedBarrier:
    def __init__(self, name: str, count: int):
        self.name, self.count, self.arrived, self.generation = name, count, 0, 0

    def arrive(self, threads: int) -> int:
        token = self.generation
        self.arrived += threads
        if self.arrived == self.count:
            self.generation += 1
            self.arrived = 0
        return token


@dataclass(frozen=True)
class Op:
    what: str
    ready: object  # () -> bool
    do: object     # () -> value sent back into the agent


@dataclass(frozen=True)
class Protocol:
    """fwd_wgmma.cuh's choices that this file tells apart: the fixed kernel is the default."""
    persistent: bool = True
    release_last_v: bool = True  # the consumers free the tile's last V stage (the fix)
    turns_once_per_cta: bool = True  # persistent ping-pong: opening pass / closing sync once per CTA
    stale_k_parity: bool = False  # a planted bug: the consumers wait on K's previous phase
    q_buffers: int = 1  # TwoQBuffers (v9 step 6 (b)): tile t uses Q buffer t % 2, its use t // 2
    q_parity_per_tile: bool = False  # a planted bug: with two Q buffers, each buffer's parity from t, not t // 2
    next_s0_early: bool = False  # NextS0UnderEpilogue (v9 step 9): the next tile's S_0 issued before the epilogue
    o_in_last_v: bool = False  # OInLastV (v9 step 14): O staged in the tile's last V stage, released after the store
    o_without_v_sync: bool = False  # a planted bug: O staged there before the other warpgroup's last P V is done
    o_release_early: bool = False  # a planted bug: the last V stage released before O is staged in it


def q_names(b: int) -> tuple[str, str, str]:
    """Q buffer b's Q-landed barrier, Q-free barrier and buffer (b = 0: the one-buffer kernel's names)."""
    return ("bar_q", "q_empty", "Q") if b == 0 else (f"bar_q[{b}]", f"q_empty[{b}]", f"Q[{b}]")


def q_use(rnd: int, p: Protocol) -> tuple[int, int]:
    """The buffer tile `rnd` of a CTA uses and which use of that buffer it is (its barriers' phase)."""
    return rnd % p.q_buffers, rnd if p.q_parity_per_tile else rnd // p.q_buffers


class Barriers:
    """A CTA model's mbarrier operations, as the roles yield them: `self.bar` maps names to MBarrier."""

    def wait(self, bar: str, parity: int, who: str) -> Op:
        b = self.bar[bar]
        return Op(f"{who}: wait {bar} parity {parity}", lambda: b.passed(parity), lambda: None)

    def arrive(self, bar: str, threads: int, who: str, tx: int = 0) -> Op:
        b = self.bar[bar]
        return Op(f"{who}: arrive {bar}", lambda: True, lambda: b.arrive(threads, tx))


class Cta(Barriers):
    """One CTA's shared state: its barriers, buffers, in-flight copies and what was read."""

    def __init__(self, stages: int, consumers: int, pingpong: bool, q_buffers: int = 1):
        threads = CONSUMER_THREADS_PER_WG * consumers
        self.S, self.consumers, self.pingpong = stages, consumers, pingpong
        self.bar = {}
        for b in range(q_buffers):
            bar_q, q_empty, _ = q_names(b)
            self.bar[bar_q], self.bar[q_empty] = MBarrier(bar_q, 1), MBarrier(q_empty, threads)
        for s in range(stages):
            for name, count in (("k_full", 1), ("v_full", 1), ("k_empty", threads), ("v_empty", threads)):
                self.bar[f"{name}[{s}]"] = MBarrier(f"{name}[{s}]", count)
        self.named = {i: NamedBarrier(f"turn barrier {i}", threads) for i in (1, 2)}
        self.named.update({i: NamedBarrier(f"V-read barrier {i}", threads) for i in (5, 6)})  # OInLastV
        self.tag = {}        # buffer -> (tile, key tile) it holds
        self.readers = {}    # buffer -> warpgroups reading it now
        self.writers = {}    # buffer -> warpgroups staging O in it now (OInLastV)
        self.loaded = []     # (buffer kind, tag) in the producer's order
        self.read = {cw: [] for cw in range(consumers)}
        self.stored = {cw: [] for cw in range(consumers)}
        self.spawned = []    # copies issued, not yet scheduled
        self.q_ahead = 0     # Q copies issued while a warpgroup still read another Q buffer

    # --- the operations the roles yield (wait and arrive: Barriers)
    def copy(self, buf: str, tag, bar: str, who: str) -> Op:
        def issue():
            if buf.startswith("Q") and any(self.readers.get(q) for q in self.readers if q.startswith("Q") and q != buf):
                self.q_ahead += 1
            self.loaded.append((buf.split("[")[0], tag))
            self.spawned.append(self._land(buf, tag, bar))
        return Op(f"{who}: TMA {buf} <- {tag}", lambda: True, issue)

    def _land(self, buf: str, tag, bar: str):
        def land():
            if self.readers.get(buf):
                raise Hazard(f"TMA into {buf} ({tag}) while warpgroup(s) {sorted(self.readers[buf])} still read "
                             f"{self.tag.get(buf)}")
            if self.writers.get(buf):
                raise Hazard(f"TMA into {buf} ({tag}) while warpgroup(s) {sorted(self.writers[buf])} stage O in it")
            self.tag[buf] = tag
            self.bar[bar].complete_tx(1)
        yield Op(f"TMA {buf} <- {tag} lands", lambda: True, land)

    def begin_read(self, buf: str, tag, cw: int) -> Op:
        def begin():
            if self.tag.get(buf) != tag:
                raise Hazard(f"consumer {cw} reads {buf} expecting {tag}, it holds {self.tag.get(buf)}")
            if self.writers.get(buf):
                raise Hazard(f"consumer {cw} reads {buf} while warpgroup(s) {sorted(self.writers[buf])} stage O in it")
            self.readers.setdefault(buf, set()).add(cw)
            if not buf.startswith("Q"):
                self.read[cw].append((buf.split("[")[0], tag))
        return Op(f"consumer {cw}: issue wgmma reading {buf} {tag}", lambda: True, begin)

    def end_read(self, buf: str, cw: int) -> Op:
        return Op(f"consumer {cw}: wgmma on {buf} done", lambda: True, lambda: self.readers[buf].discard(cw))

    def begin_write(self, buf: str, cw: int) -> Op:
        """OInLastV: the warpgroup's O written into `buf` (its own part of it), held until the store has read it."""
        def begin():
            if self.readers.get(buf):
                raise Hazard(f"consumer {cw} stages O in {buf} while warpgroup(s) {sorted(self.readers[buf])} still read it")
            self.writers.setdefault(buf, set()).add(cw)
        return Op(f"consumer {cw}: O into {buf}", lambda: True, begin)

    def end_write(self, buf: str, cw: int) -> Op:
        return Op(f"consumer {cw}: the O store has read {buf}", lambda: True, lambda: self.writers[buf].discard(cw))

    def named_arrive(self, i: int, who: str) -> Op:
        nb = self.named[i]
        return Op(f"{who}: bar.arrive {i}", lambda: True, lambda: nb.arrive(CONSUMER_THREADS_PER_WG))

    def named_wait(self, i: int, token: int, who: str) -> Op:
        nb = self.named[i]
        return Op(f"{who}: bar.sync {i} (waiting)", lambda: nb.generation > token, lambda: None)

    def store(self, tile, cw: int) -> Op:
        return Op(f"consumer {cw}: epilogue of {tile}", lambda: True, lambda: self.stored[cw].append(tile))


def producer(cta: Cta, walk, p: Protocol):
    """fwd_wgmma.cuh's producer thread (warpgroup 0, tid 0), one tile per pass, advance() after it."""
    who, S = "producer", cta.S
    rnd, it0 = 0, 0
    for m_block, bh, n in walk:
        tile = (m_block, bh)
        qb, use = q_use(rnd, p)
        bar_q, q_empty, q_buf = q_names(qb)
        if p.persistent:
            yield cta.wait(q_empty, (use & 1) ^ 1, f"{who} (tile {tile})")
        yield cta.arrive(bar_q, 1, who, tx=1)
        yield cta.copy(q_buf, (tile, None), bar_q, who)
        for j in range(n):
            s, parity = (it0 + j) % S, (((it0 + j) // S) & 1) ^ 1
            w = f"{who} (tile {tile}, key tile {j})"
            yield cta.wait(f"k_empty[{s}]", parity, w)
            yield cta.arrive(f"k_full[{s}]", 1, w, tx=1)
            yield cta.copy(f"K[{s}]", (tile, j), f"k_full[{s}]", w)
            yield cta.wait(f"v_empty[{s}]", parity, w)
            yield cta.arrive(f"v_full[{s}]", 1, w, tx=1)
            yield cta.copy(f"V[{s}]", (tile, j), f"v_full[{s}]", w)
        it0 += n  # advance()
        rnd += 1


def own_key_tiles(nq: int, nk: int, bm: int, bn: int, causal: bool):
    """fwd_wgmma.cuh's OwnKeyTiles count, (query block, warpgroup) -> the key tiles the warpgroup
    computes: those its own 64 rows see (key_tiles(wg_row0, 64, ...)), 1 when its rows are all past nq."""
    def own(m_block: int, cw: int) -> int:
        row0 = m_block * bm + 64 * cw
        return -(-(min(nk, nq, row0 + 64) if causal else nk) // bn) if row0 < nq else 1
    return own


def consumer(cta: Cta, walk, p: Protocol, cw: int, own=None):
    """fwd_wgmma.cuh's consumer warpgroup cw: S_0; then S_j with P_{j-1} V_{j-1}; the last P V; O.
    own (OwnKeyTiles): (query block, cw) -> the key tiles it computes; it hands the rest back unread."""
    who, S, t = f"consumer {cw}", cta.S, CONSUMER_THREADS_PER_WG
    pp_once = p.persistent and p.turns_once_per_cta

    def turn_wait():
        if cta.pingpong:
            token = yield cta.named_arrive(1 + cw, who)
            yield cta.named_wait(1 + cw, token, who)

    def turn_pass():
        if cta.pingpong:
            yield cta.named_arrive(1 + (cw ^ 1), who)

    if cta.pingpong and pp_once and cw == 1:
        yield cta.named_arrive(1, who)
    early = p.next_s0_early
    if early:  # the first tile's S_0, issued before the tile loop
        w, tile = f"{who} (first tile)", walk[0][:2]
        _, _, q_buf = q_names(0)
        yield cta.wait("bar_q", 0, w)
        yield cta.wait("k_full[0]", p.stale_k_parity, w)
        yield cta.begin_read(q_buf, (tile, None), cw)
        yield cta.begin_read("K[0]", (tile, 0), cw)
    rnd, it0 = 0, 0
    for i, (m_block, bh, n) in enumerate(walk):
        tile = (m_block, bh)
        w = f"{who} (tile {tile})"
        mine = own(m_block, cw) if own else n
        if cta.pingpong and not pp_once and cw == 1:
            yield cta.named_arrive(1, w)  # warpgroup 0 goes first
        qb, use = q_use(rnd, p)
        bar_q, q_empty, q_buf = q_names(qb)
        s0 = it0 % S
        if not early:
            yield cta.wait(bar_q, use & 1, w)
            yield cta.wait(f"k_full[{s0}]", (it0 // S) & 1 ^ p.stale_k_parity, w)
            yield from turn_wait()
            yield cta.begin_read(q_buf, (tile, None), cw)
            yield cta.begin_read(f"K[{s0}]", (tile, 0), cw)
            yield from turn_pass()
        yield cta.end_read(f"K[{s0}]", cw)  # wgmma_wait<0>
        yield cta.arrive(f"k_empty[{s0}]", t, w)
        for j in range(1, mine):
            sk, sv = (it0 + j) % S, (it0 + j - 1) % S
            wj = f"{who} (tile {tile}, key tile {j})"
            yield cta.wait(f"k_full[{sk}]", ((it0 + j) // S) & 1 ^ p.stale_k_parity, wj)
            yield cta.wait(f"v_full[{sv}]", ((it0 + j - 1) // S) & 1, wj)
            yield from turn_wait()
            yield cta.begin_read(f"K[{sk}]", (tile, j), cw)
            yield cta.begin_read(f"V[{sv}]", (tile, j - 1), cw)
            yield from turn_pass()
            yield cta.end_read(f"K[{sk}]", cw)  # wgmma_wait<1>: S_j done
            yield cta.arrive(f"k_empty[{sk}]", t, wj)
            yield cta.end_read(f"V[{sv}]", cw)  # wgmma_wait<0>: P_{j-1} V_{j-1} done
            yield cta.arrive(f"v_empty[{sv}]", t, wj)
        yield cta.end_read(q_buf, cw)
        if p.persistent:
            yield cta.arrive(q_empty, t, w)
        sv = (it0 + mine - 1) % S
        yield cta.wait(f"v_full[{sv}]", ((it0 + mine - 1) // S) & 1, w)
        yield from turn_wait()
        yield cta.begin_read(f"V[{sv}]", (tile, mine - 1), cw)
        yield from turn_pass()
        if early and i + 1 < len(walk):  # advance(), then the next tile's S_0 behind this P V
            nxt, nrnd, nit0 = walk[i + 1][:2], rnd + 1, it0 + n
            nqb, nuse = q_use(nrnd, p)
            nbar_q, _, nq_buf = q_names(nqb)
            ns0 = nit0 % S
            yield cta.wait(nbar_q, nuse & 1, w)
            yield cta.wait(f"k_full[{ns0}]", (nit0 // S) & 1 ^ p.stale_k_parity, w)
            yield cta.begin_read(nq_buf, (nxt, None), cw)
            yield cta.begin_read(f"K[{ns0}]", (nxt, 0), cw)
        # (after the CTA's last tile the kernel issues the same product on the buffers as they are, its
        # result unused: no copy is left to land in them, so the model leaves that read out)
        yield cta.end_read(f"V[{sv}]", cw)
        if (p.persistent or own) and p.release_last_v and (not p.o_in_last_v or p.o_release_early):
            yield cta.arrive(f"v_empty[{sv}]", t, w)
        if p.o_in_last_v:
            # OInLastV's epilogue: the other warpgroup's last P V has read the stage (bar.arrive to it, bar.sync
            # on its own), O into the stage, the TMA store, its read waited for, then the stage back.
            if cta.consumers == 2 and not p.o_without_v_sync:
                yield cta.named_arrive(5 + (cw ^ 1), w)
                token = yield cta.named_arrive(5 + cw, w)
                yield cta.named_wait(5 + cw, token, w)
            yield cta.begin_write(f"V[{sv}]", cw)
            yield cta.store(tile, cw)
            yield cta.end_write(f"V[{sv}]", cw)
            if not p.o_release_early:
                yield cta.arrive(f"v_empty[{sv}]", t, w)
        if own:
            for j in range(mine, n):  # the stages of the key tiles its rows do not see, back unread
                s, parity, wj = (it0 + j) % S, ((it0 + j) // S) & 1, f"{who} (tile {tile}, key tile {j}, skipped)"
                yield cta.wait(f"k_full[{s}]", parity, wj)
                yield cta.arrive(f"k_empty[{s}]", t, wj)
                yield cta.wait(f"v_full[{s}]", parity, wj)
                yield cta.arrive(f"v_empty[{s}]", t, wj)
        if cta.pingpong and not pp_once and cw == 0:
            token = yield cta.named_arrive(1, w)  # the closing sync of the tile
            yield cta.named_wait(1, token, w)
        if not p.o_in_last_v:
            yield cta.store(tile, cw)
        it0 += n  # advance()
        rnd += 1
    if cta.pingpong and pp_once and cw == 0:
        token = yield cta.named_arrive(1, who)
        yield cta.named_wait(1, token, who)


def simulate(walk, *, stages=2, consumers=1, pingpong=False, protocol=Protocol(), seed=0, own=None) -> Cta:
    """One CTA through its walk under a random interleaving; raises Deadlock or Hazard."""
    cta = Cta(stages, consumers, pingpong, protocol.q_buffers)
    agents = [producer(cta, walk, protocol)] + [consumer(cta, walk, protocol, cw, own) for cw in range(consumers)]
    return interleave(cta, agents, random.Random(seed))


def interleave(cta, agents, rng: random.Random):
    """Run the roles (generators yielding Ops) one ready Op at a time, picked by `rng`, until all end;
    roles a role spawns (cta.spawned) join in. Raises Deadlock when none is ready. Returns the cta."""
    current = {a: next(a) for a in agents}
    while current:
        ready = [a for a, op in current.items() if op.ready()]
        if not ready:
            raise Deadlock("; ".join(op.what for op in current.values()))
        a = rng.choice(ready)
        value = current[a].do()
        for c in cta.spawned:
            current[c] = next(c)
        cta.spawned.clear()
        try:
            current[a] = a.send(value)
        except StopIteration:
            del current[a]
    return cta


def check_complete(cta: Cta, walk, own=None):
    tiles = [(m, bh) for m, bh, _ in walk]
    for cw in range(cta.consumers):
        assert cta.stored[cw] == tiles, cw
        # every K and V tile the producer loaded (OwnKeyTiles: of the warpgroup's own), read once, in
        # the producer's order
        mine = [(k, t) for k, t in cta.loaded if k != "Q" and (not own or t[1] < own(t[0][0], cw))]
        for kind in "KV":
            assert [t for k, t in cta.read[cw] if k == kind] == [t for k, t in mine if k == kind], (cw, kind)
    assert all(b.balanced() for b in cta.bar.values()), {n: (b.pending, b.tx) for n, b in cta.bar.items()}
    assert all(nb.arrived == 0 for nb in cta.named.values())


@pytest.fixture(scope="module")
def walker(tmp_path_factory):
    exe = host_program(tmp_path_factory, WALK, "the CTAs' walks are computed by a host program compiled from the header")

    def walks(nq, nk, bm, bn, bh, grid, causal):
        out = subprocess.run([str(exe), *map(str, (nq, nk, bm, bn, bh, grid, int(causal)))],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return [[tuple(map(int, t.split(","))) for t in line.split(";") if t] for line in out.splitlines()]
    return walks


def busiest(walks, k=3):
    """The CTAs with the most tiles and the most key tiles, and the last one (a short walk)."""
    by_tiles = max(range(len(walks)), key=lambda b: len(walks[b]))
    by_work = max(range(len(walks)), key=lambda b: sum(n for *_, n in walks[b]))
    return [walks[b] for b in dict.fromkeys((by_tiles, by_work, len(walks) - 1))][:k]


# (nq, nk, BM, BN, batch*heads, grid, causal, consumer warpgroups, ping-pong, stages): v9's
# configurations (BM 64/128/192 = 1/2/3 consumers, BN 128, 2 stages) on the shapes that hung
# (tests/test_v9_gpu.py's first, lab check's), ragged edges, N = 1, Nq != Nk both ways, a CTA
# with one key tile per tile, the ping-pong candidate, and a 3-stage ring (n_tiles not a multiple).
CASES = [
    (300, 300, 64, 128, 8 * 40, 264, True, 1, False, 2),
    (300, 300, 64, 128, 8 * 40, 264, False, 1, False, 2),
    (1000, 1000, 64, 128, 2 * 3, 7, False, 1, False, 2),
    (257, 129, 128, 128, 4 * 33, 40, True, 2, False, 2),
    (129, 1000, 128, 128, 3 * 4, 5, True, 2, False, 2),
    (1, 239, 128, 128, 6 * 70, 132, True, 2, False, 2),
    (100, 100, 128, 128, 50, 3, True, 2, False, 2),
    (4097, 2000, 192, 128, 2, 5, False, 3, False, 2),
    (512, 512, 128, 128, 8, 3, True, 2, True, 2),
    (300, 700, 128, 128, 6, 4, False, 2, True, 2),
    (1000, 777, 64, 128, 5, 3, True, 1, False, 3),
]
SEEDS = 4


def case_id(c):
    return "nq{}-nk{}-BM{}-BN{}-bh{}-grid{}-{}-C{}{}-S{}".format(
        *c[:6], "causal" if c[6] else "full", c[7], "pp" if c[8] else "", c[9])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_persistent_protocol_runs_every_tile_without_deadlock_or_hazard(walker, case):
    nq, nk, bm, bn, bh, grid, causal, consumers, pp, stages = case
    walks = walker(nq, nk, bm, bn, bh, grid, causal)
    for walk in busiest(walks):
        for seed in range(SEEDS):
            cta = simulate(walk, stages=stages, consumers=consumers, pingpong=pp, seed=seed)
            check_complete(cta, walk)


# OwnKeyTiles (v9 step 5's candidate, three consumers, BM = 192): (nq, nk, batch*heads, grid, causal).
# A ragged last block with a warpgroup past nq (N = 512), causal blocks whose warpgroups own 1-2 key
# tiles fewer than the block's, causal Nq > Nk, N = 1 (two warpgroups skip 7 of 8 key tiles), and a
# 3-stage ring.
OWN_CASES = [
    (512, 512, 32, 7, False, 2),
    (1000, 1000, 6, 4, True, 2),
    (700, 300, 5, 3, True, 2),
    (1, 1000, 6, 4, False, 2),
    (2048, 2048, 2, 3, True, 3),
]


@pytest.mark.parametrize("case", OWN_CASES, ids=lambda c: "nq{}-nk{}-bh{}-grid{}-{}-S{}".format(
    *c[:4], "causal" if c[4] else "full", c[5]))
def test_own_key_tiles_runs_every_tile_without_deadlock_or_hazard(walker, case):
    nq, nk, bh, grid, causal, stages = case
    own = own_key_tiles(nq, nk, 192, 128, causal)
    walks = walker(nq, nk, 192, 128, bh, grid, causal)
    skipped = sum(n - own(m, cw) for w in walks for m, _, n in w for cw in range(3))
    assert skipped > 0  # the case exercises the skip
    for walk in busiest(walks):
        for seed in range(SEEDS):
            check_complete(simulate(walk, stages=stages, consumers=3, seed=seed, own=own), walk, own)


def test_own_key_tiles_with_one_tile_per_cta_needs_the_last_v_released(walker):
    # A warpgroup that skips key tiles lets the producer refill the stage of its last V inside the
    # tile (N = 1, 8 key tiles, 2 stages): the release the kernel gives OwnKeyTiles with one tile per
    # CTA too. Without it the producer waits on v_empty.
    own = own_key_tiles(1, 1000, 192, 128, False)
    walk = walker(1, 1000, 192, 128, 6, 4, False)[0][:1]
    for seed in range(SEEDS):
        check_complete(simulate(walk, consumers=3, protocol=Protocol(persistent=False), seed=seed, own=own), walk, own)
        with pytest.raises(Deadlock) as e:
            simulate(walk, consumers=3, protocol=Protocol(persistent=False, release_last_v=False), seed=seed, own=own)
        assert "producer" in str(e.value) and "v_empty" in str(e.value), str(e.value)


def test_the_walk_hands_the_hung_shape_several_tiles_per_cta(walker):
    # tests/test_v9_gpu.py's first case (B8 H40 N300 D64 causal: 5 query blocks of 64, 3 units per
    # head, 960 units over 264 CTAs): what hung on the GPU, so what the model must cover.
    walks = walker(300, 300, 64, 128, 320, 264, True)
    assert sum(len(w) for w in walks) == 5 * 320 and max(len(w) for w in walks) >= 7
    assert {n for w in walks for *_, n in w} == {1, 2, 3}


def test_before_the_fix_a_cta_deadlocks_at_its_second_tile_never_at_its_first(walker):
    old = Protocol(release_last_v=False)
    walks = walker(300, 300, 64, 128, 320, 264, True)
    walk = busiest(walks)[0]
    for seed in range(SEEDS):
        check_complete(simulate(walk[:1], protocol=old, seed=seed), walk[:1])  # one tile: as on the GPU
        with pytest.raises(Deadlock) as e:
            simulate(walk, protocol=old, seed=seed)
        assert "producer" in str(e.value) and "v_empty" in str(e.value), str(e.value)
    # One CTA per tile (v6, v8) frees no last V either, and needs not: its ring is never refilled.
    v6 = Protocol(persistent=False, release_last_v=False)
    for seed in range(SEEDS):
        check_complete(simulate(walk[:1], consumers=2, protocol=v6, seed=seed), walk[:1])


def test_ping_pong_turns_rearmed_per_tile_can_deadlock_and_once_per_cta_cannot(walker):
    walk = walker(512, 512, 128, 128, 8, 3, False)[0]
    rearmed = Protocol(turns_once_per_cta=False)
    outcomes = []
    for seed in range(40):
        check_complete(simulate(walk, consumers=2, pingpong=True, seed=seed), walk)
        try:
            simulate(walk, consumers=2, pingpong=True, protocol=rearmed, seed=seed)
            outcomes.append("ok")
        except Deadlock as e:
            assert "bar.sync" in str(e), str(e)
            outcomes.append("deadlock")
    assert "deadlock" in outcomes, outcomes  # the race exists: warpgroup 1's two passes complete barrier 1


def test_the_model_catches_a_consumer_that_waits_on_the_wrong_phase(walker):
    # A parity bug (the consumers wait on K's other phase) lets a wait pass before the copy landed
    # (a read of stale data) or wait for a phase one ahead (a deadlock): never a clean run.
    walk = walker(1000, 1000, 64, 128, 6, 7, False)[0]
    caught = set()
    for seed in range(2 * SEEDS):
        with pytest.raises((Hazard, Deadlock)) as e:
            simulate(walk, protocol=Protocol(stale_k_parity=True), seed=seed)
        caught.add(e.type)
        if e.type is Hazard:
            assert "consumer 0 reads K" in str(e.value), str(e.value)
    assert Hazard in caught, caught


# TwoQBuffers (v9 step 6 (b)): the cases above with two Q buffers (one, two and three consumers,
# ping-pong, N = 1 queries over ragged keys, a CTA with one key tile per tile, a 3-stage ring).
Q2_CASES = [CASES[0], CASES[5], CASES[7], CASES[8], CASES[9], CASES[10],
            (1000, 1, 128, 128, 3 * 50, 132, False, 2, True, 2)]


@pytest.mark.parametrize("case", Q2_CASES, ids=case_id)
def test_two_q_buffers_run_every_tile_without_deadlock_or_hazard(walker, case):
    nq, nk, bm, bn, bh, grid, causal, consumers, pp, stages = case
    q2 = Protocol(q_buffers=2)
    for walk in busiest(walker(nq, nk, bm, bn, bh, grid, causal)):
        for seed in range(SEEDS):
            check_complete(simulate(walk, stages=stages, consumers=consumers, pingpong=pp, protocol=q2, seed=seed), walk)


def test_two_q_buffers_load_the_next_q_while_the_tile_still_reads_its_own(walker):
    # What the second buffer is for: the next tile's Q copy issued while a warpgroup still reads the
    # current tile's Q (some interleavings); with one buffer never (the producer waits on q_empty).
    walk = walker(512, 512, 128, 128, 8, 3, False)[0]
    ahead = {q: [simulate(walk, consumers=2, pingpong=True, protocol=Protocol(q_buffers=q), seed=seed).q_ahead
                 for seed in range(SEEDS)] for q in (1, 2)}
    assert set(ahead[1]) == {0} and max(ahead[2]) > 0, ahead


def test_two_q_buffers_with_a_per_tile_parity_fail(walker):
    # A planted bug: each buffer's barriers waited with the tile's parity (t & 1), not the buffer's
    # use ((t >> 1) & 1): a wait passes before the copy landed or waits for a phase that never comes.
    walk = busiest(walker(300, 300, 64, 128, 8 * 40, 264, True))[0]
    for seed in range(SEEDS):
        with pytest.raises((Hazard, Deadlock)):
            simulate(walk, protocol=Protocol(q_buffers=2, q_parity_per_tile=True), seed=seed)


# NextS0UnderEpilogue (v9 step 9): one consumer warpgroup without turns, one and two Q buffers, on the
# one-consumer cases above (causal and not, ragged, a CTA of several tiles, a 3-stage ring, N = 1).
EARLY_CASES = [c for c in CASES + [(1000, 1, 64, 128, 3 * 50, 132, False, 1, False, 2),
                                   (700, 300, 64, 128, 2 * 20, 9, True, 1, False, 3)] if c[7] == 1 and not c[8]]


@pytest.mark.parametrize("q_buffers", [1, 2])
@pytest.mark.parametrize("case", EARLY_CASES, ids=case_id)
def test_the_next_tile_s_first_product_under_the_epilogue_runs_every_tile(walker, case, q_buffers):
    nq, nk, bm, bn, bh, grid, causal, consumers, pp, stages = case
    early = Protocol(q_buffers=q_buffers, next_s0_early=True)
    for walk in busiest(walker(nq, nk, bm, bn, bh, grid, causal)):
        for seed in range(SEEDS):
            check_complete(simulate(walk, stages=stages, consumers=consumers, pingpong=pp, protocol=early, seed=seed), walk)


def test_the_next_tile_s_first_product_waits_on_its_own_k_phase(walker):
    # A planted bug in the early path too: K_0 of the next tile waited on the previous phase.
    walk = busiest(walker(300, 300, 64, 128, 8 * 40, 264, True))[0]
    for seed in range(SEEDS):
        with pytest.raises((Hazard, Deadlock)):
            simulate(walk, protocol=Protocol(q_buffers=2, next_s0_early=True, stale_k_parity=True), seed=seed)


def _sites(text: str, *patterns: str) -> int:
    return sum(len(re.findall(p, text)) for p in patterns)


def test_the_model_has_the_kernel_s_barrier_sites_role_by_role():
    # A drift alarm, not a proof: each role of the model waits, arrives and copies at as many places
    # as fwd_wgmma.cuh's role does, so a barrier operation added to or removed from the kernel (the
    # missing release was one) fails here until the model is changed with it.
    src = (REPO / "kernels" / "hopper" / "fwd_wgmma.cuh").read_text()
    kernel_producer = src[src.index("// ---------------- producer"):src.index("// ---------------- consumers")]
    kernel_consumer = src[src.index("// ---------------- consumers"):src.index("#else")]
    # HalfLastKeyTile's peeled key step (v9 step 11) repeats the key loop's barrier operations one for one
    # at another width: counted apart, against the loop body's own (k_full, v_full; k_empty, v_empty), and
    # left out of the comparison with the model, which replays the protocol once.
    begin, end = kernel_consumer.index("// ---- HalfLastKeyTile: begin"), kernel_consumer.index("// ---- HalfLastKeyTile: end")
    half = kernel_consumer[begin:end]
    kernel_consumer = kernel_consumer[:begin] + kernel_consumer[end:]
    assert (_sites(half, r"lab_mbar_wait\("), _sites(half, r"lab_mbar_arrive\w*\(")) == (2, 2)
    model_producer, model_consumer = inspect.getsource(producer), inspect.getsource(consumer)
    assert (_sites(kernel_producer, r"lab_mbar_wait\("), _sites(kernel_producer, r"lab_mbar_arrive\w*\("),
            _sites(kernel_producer, r"lab_tma_load_3d\(")) == (
        _sites(model_producer, r"cta\.wait\("), _sites(model_producer, r"cta\.arrive\("),
        _sites(model_producer, r"cta\.copy\(")) == (3, 3, 3)
    assert (_sites(kernel_consumer, r"lab_mbar_wait\("), _sites(kernel_consumer, r"lab_mbar_arrive\w*\(")) == (
        _sites(model_consumer, r"cta\.wait\("), _sites(model_consumer, r"cta\.arrive\(")) == (11, 8)


# OInLastV (v9 step 14's candidate, FlashAttention-3's 176-key tile at D=128 with O by TMA): O staged in the tile's
# last V stage, two consumers in ping-pong (the only kind it is built for), on the persistent walk.
O_IN_V_CASES = [(8192, 8192, 128, 176, 2, 3, False, 2, True, 2),
                (1000, 300, 128, 176, 6, 4, False, 2, True, 2),
                (300, 1, 128, 176, 9, 4, False, 2, True, 2),
                (512, 512, 128, 176, 8, 3, True, 2, True, 2)]


@pytest.mark.parametrize("case", O_IN_V_CASES, ids=case_id)
@pytest.mark.parametrize("q_buffers", [1, 2])
def test_o_staged_in_the_last_v_stage_runs_every_tile_without_deadlock_or_hazard(walker, case, q_buffers):
    nq, nk, bm, bn, bh, grid, causal, consumers, pp, stages = case
    protocol = Protocol(o_in_last_v=True, q_buffers=q_buffers)
    for walk in busiest(walker(nq, nk, bm, bn, bh, grid, causal)):
        for seed in range(SEEDS):
            check_complete(simulate(walk, stages=stages, consumers=consumers, pingpong=pp, protocol=protocol,
                                    seed=seed), walk)


@pytest.mark.parametrize("bug", ["o_without_v_sync", "o_release_early"])
def test_o_staged_in_v_without_its_sync_or_with_the_stage_released_early_is_caught(walker, bug):
    # Without the V-read barrier a warpgroup writes O over V that the other one's last P V still reads; with the
    # stage released before O is staged, the producer's next V lands on O: each a hazard on some interleaving.
    walk = busiest(walker(1000, 1000, 128, 176, 6, 2, False))[0]
    protocol = Protocol(o_in_last_v=True, **{bug: True})
    caught = 0
    for seed in range(4 * SEEDS):
        try:
            simulate(walk, consumers=2, pingpong=True, protocol=protocol, seed=seed)
        except Hazard:
            caught += 1
    assert caught > 0
