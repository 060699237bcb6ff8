"""v8's backward barrier protocol (kernels/v8_wgmma_bwd.cu), replayed on the CPU for each product order.

Step 3's tuning candidates keep wgmma products in flight longer than the measured default: FA3's
order (overlap 1) retires dV and dQ before dK and releases dO's stage first; overlap 2 also issues
the next step's S^T after waiting on the next stage's q_full, before this step's Q stage is
released. Whether that can deadlock against the producer's ring, or let a TMA copy land in a stage
(or a warpgroup store dS^T into a buffer) that a product still reads, is a question about the
protocol, answered here without a GPU with tests/test_fwd_pipeline_model.py's machinery (mbarrier
phases and try_wait.parity, named barriers as thread counts, copies landing at random moments into
tagged buffers, random interleavings).

The roles below are transcribed from the kernel: the producer thread's loop, and each consumer
warpgroup's sequence of mbarrier waits, operand reads (a product reads its shared-memory operands
from its issue until the wgmma.wait_group that retires it: the latest moment it can still read),
dS^T stores, the named barrier and the releases, per order. The row statistics travel with their
tiles (LSE2 with Q, Dsum with dO: one barrier each) and are covered by those reads.
"""

from __future__ import annotations

import inspect
import random
import re
from collections import Counter

import pytest

from lab.ladder.registry import builtin
from test_fwd_pipeline_model import CONSUMER_THREADS_PER_WG, Barriers, Deadlock, Hazard, MBarrier, NamedBarrier, Op, interleave

CONSUMERS = 2


class BwdCta(Barriers):
    """One backward CTA: its barriers, the Q/dO ring, the two dS^T buffers, and who reads what."""

    def __init__(self, stages: int):
        threads = CONSUMER_THREADS_PER_WG * CONSUMERS
        self.S = stages
        self.bar = {"kv_full": MBarrier("kv_full", 1)}
        for s in range(stages):
            for name, count in (("q_full", 1), ("do_full", 1), ("q_empty", threads), ("do_empty", threads)):
                self.bar[f"{name}[{s}]"] = MBarrier(f"{name}[{s}]", count)
        self.named = NamedBarrier("dS^T barrier 1", threads)
        self.tag = {}                                  # buffer -> step whose data it holds
        self.readers = {}                              # buffer -> Counter of (warpgroup, product)
        self.reads = {cw: [] for cw in range(CONSUMERS)}
        self.spawned = []

    def _reading(self, buf: str) -> Counter:
        return self.readers.setdefault(buf, Counter())

    def copy(self, buf: str, step, bar: str, who: str) -> Op:
        def land():
            if +self._reading(buf):
                raise Hazard(f"TMA into {buf} (step {step}) while {dict(self._reading(buf))} still read step "
                             f"{self.tag.get(buf)}")
            self.tag[buf] = step
            self.bar[bar].complete_tx(1)

        def landing():
            yield Op(f"TMA {buf} <- step {step} lands", lambda: True, land)
        return Op(f"{who}: TMA {buf} <- step {step}", lambda: True, lambda: self.spawned.append(landing()))

    def begin_read(self, buf: str, step, cw: int, product: str) -> Op:
        def begin():
            if self.tag.get(buf) != step:
                raise Hazard(f"consumer {cw}'s {product} reads {buf} expecting step {step}, it holds {self.tag.get(buf)}")
            self._reading(buf)[(cw, product)] += 1
            self.reads[cw].append((product, step))
        return Op(f"consumer {cw}: issue {product} reading {buf}", lambda: True, begin)

    def retire(self, buf: str, cw: int, product: str) -> Op:
        def end():
            self._reading(buf)[(cw, product)] -= 1
        return Op(f"consumer {cw}: {product} retired", lambda: True, end)

    def store_ds(self, b: int, step, cw: int) -> Op:
        buf = f"dS[{b}]"

        def store():
            if +self._reading(buf):
                raise Hazard(f"consumer {cw} stores dS^T of step {step} into {buf} while {dict(self._reading(buf))} "
                             f"still read step {self.tag.get(buf)}")
            # Both warpgroups write their key rows of one tile: the tag is the step once both have.
            self.tag[buf] = step
        return Op(f"consumer {cw}: st.shared dS^T -> {buf}", lambda: True, store)

    def named_sync(self, who: str):
        token = self.named.arrive(CONSUMER_THREADS_PER_WG)
        return Op(f"{who}: bar.sync 1 (waiting)", lambda: self.named.generation > token, lambda: None)


def producer(cta: BwdCta, n: int):
    # v8_wgmma_bwd.cu's producer thread: K/V once, then per step Q + LSE2 and dO + Dsum.
    who, S = "producer", cta.S
    yield cta.arrive("kv_full", 1, who, tx=2)
    yield cta.copy("K", "kv", "kv_full", who)
    yield cta.copy("V", "kv", "kv_full", who)
    for it in range(n):
        s, parity = it % S, ((it // S) & 1) ^ 1
        yield cta.wait(f"q_empty[{s}]", parity, who)
        yield cta.arrive(f"q_full[{s}]", 1, who, tx=1)
        yield cta.copy(f"Q[{s}]", it, f"q_full[{s}]", who)
        yield cta.wait(f"do_empty[{s}]", parity, who)
        yield cta.arrive(f"do_full[{s}]", 1, who, tx=1)
        yield cta.copy(f"dO[{s}]", it, f"do_full[{s}]", who)


def consumer(cta: BwdCta, n: int, order: int, cw: int, bug: str = ""):
    """One consumer warpgroup's step loop for product order 0 (default), 1 (FA3's) or 2 (next S^T)."""
    who, S, threads = f"consumer {cw}", cta.S, CONSUMER_THREADS_PER_WG
    yield cta.wait("kv_full", 0, who)

    def issue_s(it):
        s = it % S
        yield cta.wait(f"q_full[{s}]", (it // S) & 1, who)
        yield cta.begin_read(f"Q[{s}]", it, cw, "S^T")

    def issue_dp(it):
        s = it % S
        yield cta.wait(f"do_full[{s}]", (it // S) & 1, who)
        yield cta.begin_read(f"dO[{s}]", it, cw, "dP^T")

    if order == 2 and n > 0:
        yield from issue_s(0)
    for it in range(n):
        s, b = it % S, (0 if bug == "one dS buffer" else it & 1)
        q, do, ds = f"Q[{s}]", f"dO[{s}]", f"dS[{b}]"
        if order in (0, 1):
            yield from issue_s(it)
        yield from issue_dp(it)
        yield cta.retire(q, cw, "S^T")        # wait<1>
        yield cta.retire(do, cw, "dP^T")      # wait<0>
        if order == 0:
            yield cta.begin_read(do, it, cw, "dV")
            yield cta.begin_read(q, it, cw, "dK")
            yield cta.store_ds(b, it, cw)
            yield cta.named_sync(who)
            yield cta.begin_read(ds, it, cw, "dQ")
            for buf, product in ((do, "dV"), (q, "dK"), (ds, "dQ")):  # wait<0>
                yield cta.retire(buf, cw, product)
            yield cta.arrive(f"q_empty[{s}]", threads, who)
            yield cta.arrive(f"do_empty[{s}]", threads, who)
            continue
        yield cta.begin_read(do, it, cw, "dV")
        yield cta.store_ds(b, it, cw)
        yield cta.named_sync(who)
        yield cta.begin_read(ds, it, cw, "dQ")
        yield cta.begin_read(q, it, cw, "dK")
        if bug == "release Q before dK":
            yield cta.arrive(f"q_empty[{s}]", threads, who)
        yield cta.retire(do, cw, "dV")        # wait<1>: dV and dQ retired
        yield cta.retire(ds, cw, "dQ")
        yield cta.arrive(f"do_empty[{s}]", threads, who)
        if order == 2 and it + 1 < n:
            yield from issue_s(it + 1)
        # (dQ's RED into global memory here)
        yield cta.retire(q, cw, "dK")         # wait<1> (order 2, a next step) or wait<0>
        if bug != "release Q before dK":
            yield cta.arrive(f"q_empty[{s}]", threads, who)


def simulate(n: int, *, stages: int, order: int, seed: int, bug: str = "") -> BwdCta:
    """One CTA's n steps under a random interleaving; raises Deadlock or Hazard."""
    cta = BwdCta(stages)
    agents = [producer(cta, n)] + [consumer(cta, n, order, cw, bug) for cw in range(CONSUMERS)]
    return interleave(cta, agents, random.Random(seed))


CASES = [(order, stages, n) for order in (0, 1, 2) for stages in (2, 3) for n in (1, 2, 3, 5, 9)]


@pytest.mark.parametrize("order,stages,n", CASES, ids=[f"order{o}-S{s}-steps{n}" for o, s, n in CASES])
def test_every_order_runs_its_steps_without_deadlock_or_hazard(order, stages, n):
    for seed in range(60):
        cta = simulate(n, stages=stages, order=order, seed=seed)
        products = ["S^T", "dP^T", "dV", "dK", "dQ"]
        for cw in range(CONSUMERS):  # every product of every step, on the step's own tiles
            assert sorted(cta.reads[cw]) == sorted((p, it) for it in range(n) for p in products), cw
        assert all(b.balanced() for b in cta.bar.values()), {k: (b.pending, b.tx) for k, b in cta.bar.items()}
        assert cta.named.arrived == 0 and not any(+c for c in cta.readers.values())


@pytest.mark.parametrize("bug,order", [("release Q before dK", 1), ("release Q before dK", 2), ("one dS buffer", 2)])
def test_the_model_catches_a_release_too_early_and_a_single_ds_buffer(bug, order):
    # The premise of the test above: the same replays find the hazard a plausible slip would cause.
    caught = set()
    for seed in range(300):
        try:
            simulate(6, stages=2, order=order, seed=seed, bug=bug)
        except (Hazard, Deadlock) as e:
            caught.add(type(e))
    assert Hazard in caught, bug


def _sites(text: str, *patterns: str) -> int:
    return sum(len(re.findall(p, text)) for p in patterns)


def test_the_model_has_the_overlapped_orders_barrier_sites():
    # A drift alarm, not a proof: the kernel's overlapped consumer block waits and arrives at as many
    # places as the model's (q_full, do_full; do_empty, q_empty), and its producer as the model's.
    src = next(t for v in builtin() if v.kind == "cuda" and v.backward and "Overlapped<" in (t := v.source.read_text()))
    overlapped = src[src.index("// Step 3's orders (v8_notes.md)"):src.index("  } else {\n    for (int it = 0, mi = 0")]
    kernel_producer = src[src.index("// ---------------- producer"):src.index("// ---------------- consumers")]
    assert (_sites(overlapped, r"lab_mbar_wait\("), _sites(overlapped, r"lab_mbar_arrive\w*\(")) == (2, 2)
    assert (_sites(kernel_producer, r"lab_mbar_wait\("), _sites(kernel_producer, r"lab_mbar_arrive\w*\(")) == (
        _sites(inspect.getsource(producer), r"cta\.wait\("), _sites(inspect.getsource(producer), r"cta\.arrive\(")) == (2, 3)
    # The model's consumer: the two issue waits; releases: order 0's two, the overlapped orders' two,
    # the planted early release of Q.
    model = inspect.getsource(consumer)
    assert (_sites(model, r'cta\.wait\(f"(q|do)_full'), _sites(model, r'cta\.arrive\(f"(q|do)_empty')) == (2, 2 + 2 + 1)
