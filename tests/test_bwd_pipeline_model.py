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

Step 4's TMA-dQ (TmaDq<>: one staging buffer per consumer warpgroup) adds a third role, the dQ
writer (warp 1 of the producer warpgroup), a dq_full barrier per warpgroup, and the writer's warp at
the dS^T named barrier: the warpgroup stores its dQ share into its buffer (after that step's dS^T
barrier) and arrives dq_full (every thread); the writer waits dq_full for both warpgroups, issues the
buffers' tensor reductions (the copy engine reads them at some later moment, an agent of its own),
waits for those reads (cp.async.bulk.wait_group.read 0) and arrives (bar.arrive) on the next step's
dS^T barrier, having arrived once before the first. The replays check that no store lands in a
buffer the engine still reads, that the engine reads each step's share of each warpgroup once, in
order, and that nothing deadlocks.
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
WRITER_WARP_THREADS = 32


class BwdCta(Barriers):
    """One backward CTA: its barriers, the Q/dO ring, the two dS^T buffers, and who reads what."""

    def __init__(self, stages: int, tma_dq: bool = False, seed: int = 0):
        threads = CONSUMER_THREADS_PER_WG * CONSUMERS
        self.S, self.tma_dq = stages, tma_dq
        self.bar = {"kv_full": MBarrier("kv_full", 1)}
        for s in range(stages):
            for name, count in (("q_full", 1), ("do_full", 1), ("q_empty", threads), ("do_empty", threads)):
                self.bar[f"{name}[{s}]"] = MBarrier(f"{name}[{s}]", count)
        for cw in range(CONSUMERS if tma_dq else 0):  # TMA-dQ: dq_full counts the warpgroup's threads
            self.bar[f"dq_full[{cw}]"] = MBarrier(f"dq_full[{cw}]", CONSUMER_THREADS_PER_WG)
        self.engine_reading = Counter()                # staging buffer -> reductions still reading it
        self.reduced = {cw: [] for cw in range(CONSUMERS)}  # steps whose dQ share the engine read
        self.unread_groups = 0                         # the writer's bulk groups not yet read
        self.engine_lag = random.Random(seed + 7919)   # how long the engine takes to read a buffer
        # The dS^T barrier; TMA-dQ: the dQ writer's warp arrives on it too.
        self.named = NamedBarrier("dS^T barrier 1", threads + (WRITER_WARP_THREADS if tma_dq else 0))
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

    def store_dq(self, cw: int, step) -> Op:
        buf = f"dQs[{cw}]"

        def store():
            if self.engine_reading[buf]:
                raise Hazard(f"consumer {cw} stores dQ of step {step} into {buf} while the copy engine still "
                             f"reads step {self.tag.get(buf)}")
            self.tag[buf] = step
        return Op(f"consumer {cw}: st.shared dQ -> {buf}", lambda: True, store)

    def reduce_dq(self, cw: int, step) -> Op:
        buf = f"dQs[{cw}]"

        def engine_reads():
            # The engine reads when L2 lets it: up to ~40 turns of its own (each a random pick among
            # the agents), so that a buffer refilled too early meets a read still pending.
            for _ in range(self.engine_lag.randrange(40)):
                yield Op(f"engine busy before reading {buf}", lambda: True, lambda: None)

            def read():
                if self.tag.get(buf) != step:
                    raise Hazard(f"the engine adds {buf} for step {step} of consumer {cw}; it holds "
                                 f"{self.tag.get(buf)}")
                self.reduced[cw].append(step)
                self.engine_reading[buf] -= 1
                self.unread_groups -= 1
            yield Op(f"engine reads {buf} (step {step})", lambda: True, read)

        def issue():
            self.engine_reading[buf] += 1
            self.unread_groups += 1
            self.spawned.append(engine_reads())
        return Op(f"dQ writer: cp.reduce.async.bulk.tensor {buf} (step {step})", lambda: True, issue)

    def wait_reads(self, who: str) -> Op:
        return Op(f"{who}: cp.async.bulk.wait_group.read 0", lambda: self.unread_groups == 0, lambda: None)

    def named_arrive(self, who: str) -> Op:
        return Op(f"{who}: bar.arrive 1", lambda: True, lambda: self.named.arrive(WRITER_WARP_THREADS))

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


def dq_writer(cta: BwdCta, n: int, bug: str = ""):
    # v8_wgmma_bwd.cu's dQ writer (TMA-dQ): per step, both warpgroups' shares, then the next step's
    # dS^T barrier once the engine has read them.
    who = "dQ writer"
    if bug != "no first arrival":
        yield cta.named_arrive(who)
    for it in range(n):
        for cw in range(CONSUMERS):
            yield cta.wait(f"dq_full[{cw}]", it & 1, who)
            yield cta.reduce_dq(cw, it)
        if bug != "release dQ before its read":
            yield cta.wait_reads(who)
        if it + 1 < n:
            yield cta.named_arrive(who)


def stage_dq(cta: BwdCta, it: int, cw: int):
    # The consumer side of TMA-dQ (dq_stage in the kernel), in place of the RED from registers.
    yield cta.store_dq(cw, it)
    yield cta.arrive(f"dq_full[{cw}]", CONSUMER_THREADS_PER_WG, f"consumer {cw}")


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
            if cta.tma_dq:
                yield from stage_dq(cta, it, cw)
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
        if cta.tma_dq:                        # TMA-dQ (else dQ's RED into global memory here)
            yield from stage_dq(cta, it, cw)
        yield cta.retire(q, cw, "dK")         # wait<1> (order 2, a next step) or wait<0>
        if bug != "release Q before dK":
            yield cta.arrive(f"q_empty[{s}]", threads, who)


def simulate(n: int, *, stages: int, order: int, seed: int, bug: str = "", tma_dq: bool = False) -> BwdCta:
    """One CTA's n steps under a random interleaving; raises Deadlock or Hazard."""
    cta = BwdCta(stages, tma_dq, seed)
    agents = [producer(cta, n)] + [consumer(cta, n, order, cw, bug) for cw in range(CONSUMERS)]
    if tma_dq:
        agents.append(dq_writer(cta, n, bug))
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


# TMA-dQ as compiled: order 0 at D=64, overlap-FA3 at D=128; order 2 too, for the protocol's sake.
TMA_CASES = [(order, stages, n) for order in (0, 1, 2) for stages in (2, 3) for n in (1, 2, 3, 5, 9)]


@pytest.mark.parametrize("order,stages,n", TMA_CASES, ids=[f"order{o}-S{s}-steps{n}" for o, s, n in TMA_CASES])
def test_tma_dq_hands_every_share_to_the_engine_once_without_deadlock_or_hazard(order, stages, n):
    for seed in range(40):
        cta = simulate(n, stages=stages, order=order, seed=seed, tma_dq=True)
        for cw in range(CONSUMERS):  # each step's share of each warpgroup, read once, in order
            assert cta.reduced[cw] == list(range(n)), (cw, cta.reduced[cw])
        assert all(b.balanced() for b in cta.bar.values()), {k: (b.pending, b.tx) for k, b in cta.bar.items()}
        assert cta.unread_groups == 0 and not +cta.engine_reading and cta.named.arrived == 0


@pytest.mark.parametrize("bug,order,caught_as", [("release dQ before its read", 1, Hazard),
                                                 ("release dQ before its read", 0, Hazard),
                                                 ("no first arrival", 1, Deadlock)])
def test_the_model_catches_a_dq_buffer_freed_too_early_or_never(bug, order, caught_as):
    caught = set()
    for seed in range(300):
        try:
            simulate(6, stages=2, order=order, seed=seed, bug=bug, tma_dq=True)
        except (Hazard, Deadlock) as e:
            caught.add(type(e))
    assert caught_as in caught, bug


def _sites(text: str, *patterns: str) -> int:
    return sum(len(re.findall(p, text)) for p in patterns)


def test_the_model_has_the_overlapped_orders_barrier_sites():
    # A drift alarm, not a proof: the kernel's overlapped consumer block waits and arrives at as many
    # places as the model's (q_full, do_full; do_empty, q_empty), and its producer as the model's.
    src = next(t for v in builtin() if v.kind == "cuda" and v.backward and "Overlapped<" in (t := v.source.read_text()))
    overlapped = src[src.index("// Step 3's orders (v8_notes.md)"):src.index("  } else {\n    for (int it = 0, mi = 0")]
    kernel_producer = src[src.index("// ---------------- producer"):src.index("// ---------------- dQ writer")]
    assert (_sites(overlapped, r"lab_mbar_wait\("), _sites(overlapped, r"lab_mbar_arrive\w*\(")) == (2, 2)
    assert (_sites(kernel_producer, r"lab_mbar_wait\("), _sites(kernel_producer, r"lab_mbar_arrive\w*\(")) == (
        _sites(inspect.getsource(producer), r"cta\.wait\("), _sites(inspect.getsource(producer), r"cta\.arrive\(")) == (2, 3)
    # The model's consumer: the two issue waits; releases: order 0's two, the overlapped orders' two,
    # the planted early release of Q.
    model = inspect.getsource(consumer)
    assert (_sites(model, r'cta\.wait\(f"(q|do)_full'), _sites(model, r'cta\.arrive\(f"(q|do)_empty')) == (2, 2 + 2 + 1)


def test_the_model_has_tma_dqs_barrier_sites():
    # The same drift alarm for TMA-dQ: the kernel's dQ writer waits on dq_full and arrives on the
    # named barrier (once before its loop, once in it) as the model's dq_writer does, and the
    # consumers' dq_stage arrives on dq_full and waits on nothing, as stage_dq.
    src = next(t for v in builtin() if v.kind == "cuda" and v.backward and "TmaDq<" in (t := v.source.read_text()))
    writer = src[src.index("// ---------------- dQ writer"):src.index("// ---------------- consumers")]
    stage = src[src.index("auto dq_stage = "):src.index("if (n_steps > 0) lab_mbar_wait(kv_full, 0);")]
    model_writer, model_stage = inspect.getsource(dq_writer), inspect.getsource(stage_dq)
    assert (_sites(writer, r"lab_mbar_wait\("), _sites(writer, r"lab_named_arrive\(")) == (
        _sites(model_writer, r"cta\.wait\("), _sites(model_writer, r"cta\.named_arrive\(")) == (1, 2)
    assert (_sites(stage, r"lab_mbar_wait\(|lab_named_sync\("), _sites(stage, r"lab_mbar_arrive\w*\(")) == (
        _sites(model_stage, r"cta\.wait\(|cta\.named_sync\("), _sites(model_stage, r"cta\.arrive\(")) == (0, 1)
    # Every consumer thread arrives on dq_full (after its own stores and proxy fence): count 128; the
    # dS^T barrier counts the writer's warp beside the consumers.
    assert "lab_mbar_init(dq_full(cw), 128)" in src and "lab_mbar_arrive(dq_full(c));" in stage
    assert "kDsBarrierThreads = Base::kConsumerThreads + 32" in src
