"""The one timer of the lab, and the checks that keep its numbers true.

`time_checked` times a call by CUDA events (call latency, on the current stream) or by CUDA-graph
replays (device time), as lab.measure.bench describes, and returns a Timing only when three checks
pass; otherwise it raises TimingRefused (a CheckFailed: exit 1) with one of these statuses:

  work-outside-stream  Decided from evidence, in two steps. The screen: every call runs between a
          start and an end event on the current stream, then a DEVICE-WIDE torch.cuda.synchronize() (it
          waits for every stream of the device), then an `after` event; end -> after is the
          synchronize's own latency when all the call's work was on the stream (or joined back to it),
          and grows by work still running elsewhere. The same protocol around an empty call measures
          that latency. That difference is noisy (the host's wake-up from a long wait is not an empty
          call's), so a call whose median end -> after exceeds it by more than an allowance is only a
          suspect. The evidence: a CUPTI trace (torch.profiler, lab.profilers.kineto) of TRACE_CALLS
          calls, each between two marker copies on the calling stream, once per timing of a suspect:
          the call is refused only where the trace shows work on another stream still running after
          the calling stream had finished the call (its closing marker had started). A joined side
          stream cannot show that (the calling stream waits for it); an unjoined one does on every
          call. Where no trace can be taken, the screen's verdict stands and the reason says so. The
          graph method probes its eager warm-up calls this way (a graph cannot hold unjoined work: a
          capture that fails on that is refused too). The timed region itself is unchanged.
  wrong-output   `prepare(rep)` runs before each call, outside the timed region (lab.measure.rotation
          refills the call's inputs with the next of several seeded sets, moved: rolled over batch and
          K/V heads, signs flipped), and `verify(token, output)` judges every call's output, warm-up and timed, against
          that placement's reference: a result kept from earlier inputs (by pointer, object or value),
          work skipped on a repeated call, a partly written output are wrong for what is in the slots.
          Every call of a run, whatever it is for (warm-up, the capture, the untimed call below, a
          timed call, a traced one), loads inputs of its own, so no two calls read the same values
          while the process makes at most the rotation's `placements` calls on them. The first wrong
          output ends the timing.
  (events only) Before each timed call, one untimed call on a placement of its own warms the host
          (see _Run.rep): measured on an H100, a host idle or busy checking for a few ms between calls
          dispatches the next one 10-15% slower than the bare timer's tight loop, which a model's loop is.
  impossible     `floor` (lab.measure.floor): the time no correct implementation can beat on this
          device. The fastest repetition under it is not printed as a result; the reason gives both.
  graph-capture-failed  (graph only) The call cannot be captured for another reason than unjoined
          work (it synchronizes with the host, say: `.item()`, `.tolist()`): there is no graph whose
          replays could be timed, so no device time; the reason names CUDA's error and says to time
          it by events.

The graph method's start is HELD (as NVIDIA's nvbench holds a stream behind its "blocking kernel"): an
`opened` event, then a spin kernel on the timing stream (CudaDevice.hold: torch.cuda._sleep, cycles from
a calibration), then `start`, the replay and `end` are all queued while the spin kernel runs, so `start`
is stamped when the GPU reaches the replay with its work already queued: the interval is the replay's
device time, without the host's launch latency (cudaGraphLaunch until the first kernel starts: a few to
tens of microseconds, more on a slow host), which is not the call's. The L2 flush and the input loading
come before the hold, outside the interval. Each repetition proves its hold long enough: the host's
clock from before `opened` to after `end` was queued must be shorter than `opened` -> `start` on the
device (less HOLD_SLACK_MS): the GPU cannot stamp `opened` before the host queued it, so the host had
queued the replay and `end` before `start` was stamped. A repetition that fails the proof is done
again (a new placement, its output judged too) behind a hold at least twice as long, up to
HOLD_MAX_MS; past it the call is refused:
  host-outlasted-hold  (graph only) the host took longer to queue the replay than the longest hold:
          no interval without its launch latency could be measured.
Each graph Timing's checks say how it was measured: held_start, hold_us, host_enqueue_us and
host_enqueue_max_us (of the kept repetitions), hold_margin_min_us (the least time any kept repetition's
host finished before its hold ended), hold_retries. The events method starts on an idle GPU,
unheld: call latency, the host's dispatch included, is what it measures (held_start False).

UNDER LOAD (`under_load_ms` > 0; `lab bench --under-load`, `lab tune --under-load`): each repetition, of
either method, behind a stretch of the same call back to back for about that many ms (the call count sized
from the warm-up), untimed, on whatever the slots hold, its outputs dropped unjudged, then a synchronize.
Why: a repetition alone starts from an idle GPU, which runs at its boost clock; in a training step the
GPU has been busy for seconds and holds the clock its power limit allows (NVML's sw_power_cap), which
differs between kernels that take the same cycles (v9's notes, "Step 18": 1680 against 1770 MHz). The
stretch brings the GPU to that state; the timed call after it is the one the checks judge, loaded,
flushed and verified as without the stretch, so the stretch cannot make a wrong or kept result pass: a
call that did less work in it only leaves the GPU cooler, at a higher clock, as without the stretch.
At the end of each stretch, while its last calls still run (an idle GPU's clock climbs back at once),
NVML's reading (lab.nvml.load) is kept; the
Timing's checks say the stretch (under_load_ms, under_load_calls), how many readings there were
(load_states_read), the SM clock's median (load_sm_clock_mhz), the share of stretches NVML said ended
held down by the power limit (load_power_capped_share: POWER_CAP_REASONS) and every reason's share
(load_clock_event_reasons).

`time_checked_interleaved` is the same timer over several candidates, repetition by repetition in
rotated order so that drift hits them alike (`lab tune`); a refused candidate gets its refusal. Under
load each candidate's repetition is behind a stretch of its own calls, so each runs at its own clock.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from lab.errors import CheckFailed
from lab.measure.bench import (DEFAULT_REPS, DEFAULT_WARMUP, EVENTS, GRAPH, L2_FLUSH_BYTES, METHOD_DESCRIPTIONS,
                               TIMING_METHODS, Timing, budget_reps, capture_graph_output, summarize)

OUTSIDE_STREAM, WRONG_OUTPUT, IMPOSSIBLE = "work-outside-stream", "wrong-output", "impossible"
NOT_CAPTURABLE = "graph-capture-failed"
HOST_OUTLASTED_HOLD = "host-outlasted-hold"
STATUSES = (OUTSIDE_STREAM, WRONG_OUTPUT, IMPOSSIBLE, NOT_CAPTURABLE, HOST_OUTLASTED_HOLD)

OUTSIDE_SHARE = 0.05
"""Work outside the stream, as a share of the call's median time, that refuses it: below it the
printed time is within 5% of all the call's work, about the spread of one repetition to the next."""
OUTSIDE_SLACK_MS = 0.01
"""Work outside the stream shorter than this is not told from the synchronize's own jitter (a few
microseconds of host wake-up): a side stream hidden in a call of a few microseconds goes unseen, but
such a call's event time is host dispatch anyway."""
NOOP_PROBES = 8          # empty calls that measure the synchronize's own latency
TRACE_CALLS = 3          # calls traced for the evidence of work outside the stream
MARKER_BYTES = 4099      # the marker copies' size: no attention call copies exactly this many bytes
MIN_PROBES = 3           # eager calls probed for outside work before a graph is captured
HOLD_START_MS = 0.2
"""The graph method's first hold: the host queues `start`, a replay and `end` in tens of microseconds
(Python and PyTorch's launch calls), so 0.2 ms covers it with room; a repetition whose host took longer
is done again behind a longer hold (module docstring). A hold costs its length once per repetition."""
HOLD_MAX_MS = 50.0
"""The longest hold: a host that cannot queue one replay in 50 ms is stalled, and the call is refused."""
HOLD_SLACK_MS = 0.002
"""What the host has queued reaches the GPU's front end about a microsecond after the launch call
returns: the proof asks the host to have finished this much before the hold ended."""
HOLD_CALIBRATION_CYCLES = 1_000_000   # about 0.5 ms of torch.cuda._sleep at Hopper's clocks
UNDER_LOAD_READ_MS = 1.0
"""How long the stretch's last calls run while NVML is read (a read takes tens of microseconds)."""
UNDER_LOAD_MAX_CALLS = 100_000
"""The most calls in one stretch under load (a call of a few microseconds would otherwise ask for millions)."""
LOAD_CHECKS = ("under_load_ms", "under_load_calls", "load_states_read", "load_sm_clock_mhz", "load_power_capped_share",
               "load_clock_event_reasons")
"""The keys a Timing's checks have for UNDER LOAD (None where it was timed without)."""
POWER_CAP_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})
"""lab.nvml's names of the clock-event reasons that say the power limit held the clock down."""
CAPTURE_JOIN_ERRORS = ("unjoined", "captureisolation", "capture isolation", "captureimplicit")
"""Fragments of the CUDA errors a capture raises when work forks to a stream it never joins."""


class TimingRefused(CheckFailed):
    """The timer measured the call but will not give its time: `status` (one of STATUSES) and the
    reason; `timing` holds what was measured, for the record, never to be printed as a result."""

    def __init__(self, status: str, reason: str, timing: Timing | None = None, what: str | None = None):
        self.status, self.reason, self.timing, self.what = status, reason, timing, what
        super().__init__(f"{what + ': ' if what else ''}no time ({status}): {reason}")

    def row_reason(self) -> str:
        """The reason a sweep row or a table cell shows."""
        return f"refused by the timer ({self.status}): {self.reason}"

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "what": self.what}


class CudaDevice:
    """The device operations the timer uses (a test hands the timer a simulated device instead)."""

    def __init__(self):
        import torch

        self.torch = torch

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def host_ms(self) -> float:
        """The host's clock, in ms (the hold's proof compares its intervals with the device's)."""
        return time.perf_counter() * 1e3

    def hold(self, ms: float) -> None:
        """Busy the current stream for about `ms`: torch.cuda._sleep's one-thread spin kernel (clock64
        cycles), its cycles per ms calibrated once. Only approximate (the SM clock moves): the timer
        measures each hold between events and proves it long enough, never trusts its length."""
        self.torch.cuda._sleep(max(1, int(ms * self._cycles_per_ms())))

    def _cycles_per_ms(self) -> float:
        if getattr(self, "_cycles", None) is None:
            torch = self.torch
            took = []
            for _ in range(3):
                self.synchronize()
                start, end = self.event(), self.event()
                torch.cuda._sleep(HOLD_CALIBRATION_CYCLES // 10)   # held, so `start` waits for no launch
                start.record()
                torch.cuda._sleep(HOLD_CALIBRATION_CYCLES)
                end.record()
                self.synchronize()
                took.append(start.elapsed_time(end))
            self._cycles = HOLD_CALIBRATION_CYCLES / min(took)   # the fastest clock seen: holds not shorter than asked
        return self._cycles

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def gpu_load(self) -> dict | None:
        """lab.nvml.load of the current device, read now (its SM clock, power draw and why its clock is below
        the maximum); None where NVML cannot say (no driver library, an NVML error)."""
        from lab import nvml
        from lab.environment import gpu_uuid

        try:
            if getattr(self, "_uuid", None) is None:
                self._uuid = gpu_uuid(self.torch.cuda.get_device_properties(self.torch.cuda.current_device()))
            return nvml.load(self._uuid)
        except nvml.NvmlError:
            return None

    def flush_buffer(self, nbytes: int):
        """The L2 flush a repetition starts behind (lab.measure.l2flush): its evict() before each."""
        from lab.measure.l2flush import L2Flush

        return L2Flush(self.torch, nbytes)

    def memory_allocated(self) -> int:
        return self.torch.cuda.memory_allocated()

    def reset_peak_memory(self) -> None:
        self.torch.cuda.reset_peak_memory_stats()

    def max_memory_allocated(self) -> int:
        return self.torch.cuda.max_memory_allocated()

    def capture(self, fn: Callable[[], object], stream=None):
        """(replay, output) of `fn` captured into a CUDA graph."""
        graph, output = capture_graph_output(fn, stream)
        return graph.replay, output

    def trace_streams(self, run: Callable[[], object], prepare: Callable[[int], object] | None = None,
                      calls: int = TRACE_CALLS) -> list[dict]:
        """`calls` calls under a CUPTI trace (trace_calls); returns lab.measure.timed.traced_calls of it."""
        return self.trace_calls(run, prepare, calls)

    def trace_calls(self, run: Callable[[], object], prepare: Callable[[int], object] | None = None,
                    calls: int = TRACE_CALLS, flush=None, verify: Callable[[object, object], str | None] | None = None,
                    ) -> list[dict]:
        """`calls` calls under a CUPTI trace (torch.profiler), each between two MARKER_BYTES copies on the
        calling stream; returns lab.measure.timed.traced_calls of the trace. `flush`: zeroed before each
        call and the device synchronized, so that each starts on an idle GPU with L2 evicted, as a timed
        repetition does (probe_call); `verify(token, output)` judges each output after its closing
        marker, so its work is not the call's; the first wrong output raises TimingRefused."""
        import tempfile
        from pathlib import Path

        from lab.profilers import kineto

        torch = self.torch
        src = torch.zeros(MARKER_BYTES, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)

        def launches():
            for i in range(calls):
                token = prepare(i) if prepare is not None else None
                if flush is not None:
                    flush.evict()
                    self.synchronize()
                dst.copy_(src)    # the call starts after this on the calling stream
                out = run()
                dst.copy_(src)    # ...and the calling stream has finished it when this starts
                if verify is not None:
                    reason = verify(token, out)
                    if reason:
                        raise TimingRefused(WRONG_OUTPUT, f"a traced call: {reason}")
                del out

        with tempfile.TemporaryDirectory(prefix="lab-streams-") as tmp:
            path = Path(tmp) / "trace.json"
            kineto.profile_launches(launches, 1, path, "lab stream evidence")
            tables = kineto.read_trace(path)
        activities = [(str(r.name), r.stream_id, r.start_ns, r.end_ns, None)
                      for r in tables.kernels.itertuples()]
        activities += [(str(r.operation), r.stream_id, r.start_ns, r.end_ns, r.bytes)
                       for r in tables.memory.itertuples()]
        return traced_calls(activities, MARKER_BYTES)


@dataclass
class Checked:
    """One thing to time and what to hold it to (see time_checked)."""
    call: Callable[[], object]
    prepare: Callable[[int], object] | None = None
    verify: Callable[[object, object], str | None] | None = None
    floor: object | None = None      # lab.measure.floor.Floor
    what: str = "the call"


def outside_stream_verdict(call_gaps_ms: list[float], noop_gaps_ms: list[float], call_ms: float) -> tuple[float, float]:
    """(work outside the stream, allowance), both in ms, from the end -> after gaps of the call and of
    an empty call: the median excess over the synchronize's median latency, against the latency's own
    upper spread + OUTSIDE_SLACK_MS + OUTSIDE_SHARE of the call's median time."""
    latency = statistics.median(noop_gaps_ms)
    outside = statistics.median(call_gaps_ms) - latency
    allowance = (max(noop_gaps_ms) - latency) + OUTSIDE_SLACK_MS + OUTSIDE_SHARE * call_ms
    return outside, allowance


def traced_calls(activities: list[tuple], marker_bytes: int = MARKER_BYTES) -> list[dict]:
    """A trace's GPU activities (name, stream, start_ns, end_ns, bytes or None) as calls: the marker
    copies (copies of exactly `marker_bytes`, in pairs on the calling stream) bound each call; a
    call's work is everything else that starts between its opening marker and the next call's.
    Returns [{"stream", "done_ns" (when the closing marker started), "work": [(name, stream, start_ns,
    end_ns)]}]; [] when the markers are not all there (a trace that lost events proves nothing)."""
    acts = sorted((a for a in activities if a[2] is not None and a[3] is not None), key=lambda a: a[2])
    markers = [a for a in acts if a[4] == marker_bytes and "memcpy" in a[0].lower()]
    if not markers or len(markers) % 2:
        return []
    calls = []
    for i in range(0, len(markers), 2):
        opening, closing = markers[i], markers[i + 1]
        if opening[1] != closing[1]:
            return []
        until = markers[i + 2][2] if i + 2 < len(markers) else float("inf")
        work = [a[:4] for a in acts if opening[2] <= a[2] < until and a is not opening and a is not closing]
        calls.append({"stream": opening[1], "done_ns": closing[2], "work": work})
    return calls


def outside_stream_evidence(calls: list[dict]) -> str | None:
    """The trace's evidence of work outside the calling stream: a description of the work on another
    stream that was still running after the calling stream had finished the call, or None."""
    late = [(a, c) for c in calls for a in c["work"] if a[1] != c["stream"] and a[3] > c["done_ns"]]
    if not late:
        return None
    (name, stream, _, end), call = max(late, key=lambda ac: ac[0][3] - ac[1]["done_ns"])
    streams = sorted({a[1] for a, _ in late})
    return (f"a CUPTI trace of {len(calls)} calls shows {len(late)} kernels or copies on stream(s) "
            f"{', '.join(map(str, streams))} still running after the call's stream {call['stream']} had finished "
            f"(the latest, {name[:80]}, {(end - call['done_ns']) / 1e6:.4g} ms after)")


def traced_streams_text(calls: list[dict]) -> str:
    """What an exonerating trace showed: the streams the call's work ran on, all joined."""
    streams = sorted({a[1] for c in calls for a in c["work"]} | {c["stream"] for c in calls if c["work"]})
    return (f"a CUPTI trace of {len(calls)} calls: its work ran on stream(s) {', '.join(map(str, streams)) or 'none'}, "
            "all finished before the calling stream finished the call")


def floor_verdict(samples_ms: list[float], floor, l2_flush: bool) -> str | None:
    """None when the fastest sample is at or above the floor, else the reason."""
    if floor is None:
        return None
    limit = floor.limit_ms(l2_flush)
    fastest = min(samples_ms)
    if fastest >= limit:
        return None
    return (f"the fastest of {len(samples_ms)} repetitions took {fastest:.4g} ms, under the {floor.describe(l2_flush)}: "
            "faster than this GPU can do the work (work outside the timed region, or a kept result)")


class _Run:
    """The timer's state for one Checked: its events, probes and verdicts."""

    def __init__(self, spec: Checked, device, method: str, l2_flush: bool, noop_gaps: list[float],
                 under_load_ms: float = 0.0):
        self.spec, self.dev, self.method, self.l2_flush, self.noop_gaps = spec, device, method, l2_flush, noop_gaps
        self.under_load_ms = under_load_ms    # the stretch of calls back to back before each repetition (UNDER_LOAD)
        self.load_calls = 0                   # calls in each stretch, sized from the warm-up's per-call time
        self.read_calls = 0                   # of them, those still running when NVML is read
        self.load_states: list[dict | None] = []   # lab.nvml.load read as each stretch's last calls run
        self.timed: list[tuple] = []      # (start, end, after) of the timed repetitions
        self.probes: list[tuple] = []     # (start, end, after) of eager warm-up calls
        self.verified = 0
        self.loads = 0                    # reps handed to prepare: every call of the run takes the next
        self.warmup_done = 0
        self.peak = 0
        self.replay = None
        self.static_output = None
        self.evidence: str | None = None      # what the stream trace showed, once taken
        self.late: str | None = None          # the trace's evidence of work outside the stream
        self.trace_error = "no trace taken"
        self.outside_ms: float | None = None
        self.hold_ms = HOLD_START_MS          # the graph method's hold (module docstring), lengthened on a failed proof
        self.held: list[tuple] = []           # (hold ms on the device, host enqueue ms) of the kept repetitions
        self.hold_retries = 0

    def refuse(self, status: str, reason: str, timing: Timing | None = None):
        raise TimingRefused(status, reason, timing, self.spec.what)

    def load(self, _rep: int | None = None):
        """Load the next call's inputs (prepare gets the run's own count of them; the rotation counts
        per set of values, lab.measure.rotation); returns the token for verify."""
        if self.spec.prepare is None:
            return None
        self.loads += 1
        return self.spec.prepare(self.loads - 1)

    def judge_output(self, token, output) -> None:
        if self.spec.verify is None:
            return
        reason = self.spec.verify(token, output)
        self.verified += 1
        if reason:
            self.refuse(WRONG_OUTPUT, reason)

    def probe(self, run: Callable[[], object], flush=None):
        """One call between start and end events on the current stream, then the device-wide
        synchronize and the `after` event; returns (output, events)."""
        return probe_call(self.dev, run, flush)

    def warm(self, warmup: int, budget_s: float | None) -> float:
        """Warm-up calls (each output judged; all but the first probed for outside work); returns the
        per-call time of the second, which sizes the repetitions to a budget."""
        dev = self.dev
        dev.synchronize()
        before = dev.memory_allocated()
        dev.reset_peak_memory()
        token = self.load()
        out = self.spec.call()   # the first call: one-off set-up (cuBLAS handles, cuDNN plans), not probed
        dev.synchronize()
        self.judge_output(token, out)
        del out
        t0 = time.perf_counter()
        done = 1
        need = max(warmup, 2, MIN_PROBES + 1 if self.method == GRAPH else 0)
        per_call_ms = None
        while done < need:
            # warm-up stops once it has used a fifth of the budget (after two calls, and the probes a
            # graph's verdict needs)
            if (done >= 2 and budget_s and (time.perf_counter() - t0) >= budget_s / 5
                    and (self.method != GRAPH or len(self.probes) >= MIN_PROBES)):
                break
            token = self.load()
            t1 = time.perf_counter()
            out, events = self.probe(self.spec.call)
            if per_call_ms is None:
                per_call_ms = (time.perf_counter() - t1) * 1e3
            self.probes.append(events)
            self.judge_output(token, out)
            del out
            done += 1
        dev.synchronize()
        self.peak = int(dev.max_memory_allocated() - before)
        self.warmup_done = done
        if len(self.probes) >= MIN_PROBES:   # refuse before timing what the warm-up already shows
            self.check_outside(self.probes)
        if self.probes:   # an eager call is never faster than the device time; no flush: compute floor only
            reason = floor_verdict([s.elapsed_time(e) for s, e, _ in self.probes], self.spec.floor, False)
            if reason:
                self.refuse(IMPOSSIBLE, f"in warm-up, {reason}")
        return per_call_ms or 0.0

    def prepare_method(self, stream=None) -> None:
        if self.method != GRAPH:
            return
        self.load()   # the capture's eager call and the upload replay read a placement of their own
        try:
            self.replay, self.static_output = self.dev.capture(self.spec.call, stream)
        except RuntimeError as e:
            text = str(e).lower().replace("_", "")
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            if any(k in text for k in CAPTURE_JOIN_ERRORS):
                self.refuse(OUTSIDE_STREAM, "CUDA graph capture failed: the call forks work to a stream it never "
                            f"joins back to the calling stream ({first})")
            self.dev.synchronize()   # the failed capture has ended; nothing of it is left on the stream
            self.refuse(NOT_CAPTURABLE, f"CUDA graph capture failed ({first}): the call cannot run inside a graph "
                        "(a synchronization with the host, such as .item() or .tolist(), is the usual cause), so it "
                        "has no device time to print; time it by events")
        self.replay()   # one replay before timing: the graph's first launch uploads it
        self.dev.hold(self.hold_ms)   # the hold's kernel loaded and its length calibrated, outside any repetition
        self.dev.synchronize()

    def size_load(self, per_call_ms: float) -> None:
        """How many calls make a stretch of under_load_ms: from the warm-up's probed calls' time between
        their events (the host's time of one call where none was probed)."""
        if self.under_load_ms > 0:
            probed = [s.elapsed_time(e) for s, e, _ in self.probes]
            call_ms = max(statistics.median(probed) if probed else per_call_ms, 1e-3)
            self.load_calls = max(1, min(UNDER_LOAD_MAX_CALLS, math.ceil(self.under_load_ms / call_ms)))
            # the calls left running while NVML is read: about UNDER_LOAD_READ_MS of them, at least one
            self.read_calls = min(self.load_calls - 1, max(1, math.ceil(UNDER_LOAD_READ_MS / call_ms)))

    def under_load(self) -> dict | None:
        """The stretch before a repetition (UNDER_LOAD): load_calls calls back to back on what the slots hold,
        untimed, their outputs dropped unjudged; then a synchronize, so the repetition starts as it would
        without the stretch (its loading, flush and hold, its host dispatch) and only the GPU's state differs.
        Returns NVML's reading (None where it cannot say) taken while the stretch's last read_calls still run:
        read on an idle GPU, even right after the synchronize, the clock has already climbed back (an H200: 1950
        MHz there, where 1740 held during 3 s of calls)."""
        marker = None
        for i in range(self.load_calls):
            if i == self.load_calls - self.read_calls:
                marker = self.dev.event()
                marker.record()
            self.spec.call()
        reader = getattr(self.dev, "gpu_load", None)
        if marker is not None:
            marker.synchronize()   # the host waits until the GPU reaches the last calls, then reads
        state = reader() if reader is not None else None
        self.dev.synchronize()
        return state

    def rep(self, i: int, flush) -> None:
        if self.load_calls:
            self.load_states.append(self.under_load())
        self.timed_rep(flush)

    def timed_rep(self, flush) -> None:
        if self.method == EVENTS and self.spec.prepare is not None:
            # events time the host's dispatch too, and a host that spent milliseconds checking the last
            # output (or asleep: the same +10% on an H100) dispatches the next call slower than a model's
            # loop does. One untimed call (its output dropped) warms it, on a placement of its own: what
            # it kept (by pointer, object or value) is another placement's, wrong for the timed call; and
            # where candidates share the slots (time_checked_interleaved), what the previous candidate
            # left there is never the placement this candidate's timed call reads
            self.load()
            self.spec.call()
        if self.method == GRAPH:
            self.held_rep(flush)
            return
        token = self.load()
        out, events = self.probe(self.spec.call, flush)
        self.timed.append(events)
        self.judge_output(token, out)

    def held_rep(self, flush) -> None:
        """One graph repetition behind a hold, done again behind a longer one until the hold's proof
        holds (module docstring); each attempt loads a placement of its own and its output is judged."""
        while True:
            token = self.load()
            opened, events, enqueue_ms = held_probe(self.dev, self.replay, self.hold_ms, flush)
            self.judge_output(token, self.static_output)
            hold_ms = opened.elapsed_time(events[0])
            if enqueue_ms + HOLD_SLACK_MS < hold_ms:
                self.timed.append(events)
                self.held.append((hold_ms, enqueue_ms))
                return
            self.hold_retries += 1
            if self.hold_ms >= HOLD_MAX_MS:
                self.refuse(HOST_OUTLASTED_HOLD,
                            f"the host took {enqueue_ms:.4g} ms to queue a replay between its events, longer than the "
                            f"longest hold ({hold_ms:.4g} ms on the device, {self.hold_retries} repetitions done again): "
                            "the replay's start would include the host's launch latency, which is not device time")
            self.hold_ms = min(HOLD_MAX_MS, max(2 * self.hold_ms, 2 * enqueue_ms))

    def check_outside(self, events: list[tuple], timing: Timing | None = None) -> None:
        gaps = [e.elapsed_time(a) for _, e, a in events]
        call_ms = statistics.median(s.elapsed_time(e) for s, e, _ in events)
        outside, allowance = outside_stream_verdict(gaps, self.noop_gaps, call_ms)
        self.outside_ms = outside
        if outside <= allowance:
            return
        screen = (f"{outside:.4g} ms of GPU work was still running after the call's stream had finished "
                  f"(median of {len(gaps)} calls, a device-wide synchronize after each; the calls take "
                  f"{call_ms:.4g} ms between events on their stream; allowed {allowance:.4g} ms)")
        late = self.trace_evidence()
        if late is None and self.evidence is not None:   # the trace clears the suspect: the screen was noise
            return
        because = late if late is not None else f"{screen}; no stream trace could confirm it ({self.trace_error})"
        self.refuse(OUTSIDE_STREAM, f"{because}: a stream the call launched work on and did not join back "
                    "(wait_stream, an event) before returning", timing)

    def trace_evidence(self) -> str | None:
        """Trace the call once (lab.measure.timed's docstring); the description of late work, or None
        (then self.evidence says what the trace showed, or stays None where none could be taken)."""
        if self.evidence is not None:
            return self.late
        self.late, self.trace_error = None, "the device cannot trace"
        tracer = getattr(self.dev, "trace_streams", None)
        if tracer is None:
            return None
        try:
            calls = tracer(self.spec.call, self.load if self.spec.prepare is not None else None)
        except Exception as e:  # noqa: BLE001 - no profiler, CUPTI busy: the screen's verdict stands, said so
            self.trace_error = f"{type(e).__name__}: {str(e).strip()[:120]}"
            return None
        self.dev.synchronize()
        if not calls:
            self.trace_error = "the trace lost its markers"
            return None
        self.late = outside_stream_evidence(calls)
        self.evidence = self.late or traced_streams_text(calls)
        return self.late

    def hold_checks(self) -> dict:
        """How the start was taken: held (graph: medians of the kept repetitions' hold and host enqueue, in
        us) or on an idle GPU (events)."""
        if self.method != GRAPH or not self.held:
            return {"held_start": False, "hold_us": None, "host_enqueue_us": None, "host_enqueue_max_us": None,
                    "hold_margin_min_us": None, "hold_retries": None}
        holds, enqueues = zip(*self.held)
        return {"held_start": True, "hold_us": statistics.median(holds) * 1e3,
                "host_enqueue_us": statistics.median(enqueues) * 1e3, "host_enqueue_max_us": max(enqueues) * 1e3,
                # the proof's closest repetition: how long before its hold ended the host had queued `end`
                "hold_margin_min_us": min(h - e for h, e in self.held) * 1e3,
                "hold_retries": self.hold_retries}

    def load_checks(self) -> dict:
        """Under load (UNDER_LOAD): the stretch's length and calls, and what NVML read as each stretch's last calls ran
        (the readings' number, the SM clock's median, the share naming the power cap); all None without."""
        if not self.load_calls:
            return dict.fromkeys(LOAD_CHECKS)
        read = [x for x in self.load_states if x is not None]
        clocks = [x["sm_clock_mhz"] for x in read if x.get("sm_clock_mhz") is not None]
        reasons = Counter(r for x in read for r in (x.get("clock_event_reasons") or ()))
        return {"under_load_ms": self.under_load_ms, "under_load_calls": self.load_calls, "load_states_read": len(read),
                "load_sm_clock_mhz": statistics.median(clocks) if clocks else None,
                "load_power_capped_share": (sum(1 for x in read if POWER_CAP_REASONS & set(x.get("clock_event_reasons")
                                                                                         or ())) / len(read)
                                            if read else None),
                "load_clock_event_reasons": {r: n / len(read) for r, n in reasons.most_common()} if read else None}

    def finish(self) -> Timing:
        self.dev.synchronize()
        samples = [s.elapsed_time(e) for s, e, _ in self.timed]
        timing = summarize(samples, self.warmup_done, self.l2_flush)
        timing.method = self.method
        timing.sync = METHOD_DESCRIPTIONS[self.method]
        timing.peak_memory_bytes = self.peak
        floor = self.spec.floor
        timing.checks = {
            "outside_stream_ms": None,
            "outside_stream_evidence": None,
            "sync_latency_ms": statistics.median(self.noop_gaps),
            "input_sets": getattr(getattr(self.spec.prepare, "__self__", None), "count", None),  # RotatingInputs
            "input_placements": getattr(getattr(self.spec.prepare, "__self__", None), "placements", None),
            "outputs_verified": self.verified if self.spec.verify is not None else None,
            "floor_ms": floor.limit_ms(self.l2_flush) if floor is not None else None,
            "floor": floor.describe(self.l2_flush) if floor is not None else "no floor: this device's peaks are unknown",
        }
        # a graph's replays cannot hold unjoined work: its verdict rests on the eager warm-up calls
        probed = self.timed if self.method == EVENTS else self.probes
        if probed:
            self.check_outside(probed, timing)
            timing.checks["outside_stream_ms"] = self.outside_ms
            timing.checks["outside_stream_evidence"] = self.evidence
        timing.checks["inputs_loaded"] = self.loads if self.spec.prepare is not None else None   # traced calls too
        timing.checks.update(self.hold_checks())
        timing.checks.update(self.load_checks())
        reason = floor_verdict(samples, floor, self.l2_flush)
        if reason:
            self.refuse(IMPOSSIBLE, reason, timing)
        return timing


def flushed_by(timing: Timing, flush) -> Timing:
    """`timing` with its checks saying how each repetition's L2 was flushed (lab.measure.l2flush: where the
    evict-last sweep could not be built, the zeroing alone, and why)."""
    timing.checks["l2_flush"] = flush.describe() if flush is not None else "not flushed"
    return timing


def probe_call(dev, run: Callable[[], object], flush=None):
    if flush is not None:
        flush.evict()   # evict the inputs from L2 so every repetition reads them from DRAM
    dev.synchronize()   # start on an idle GPU: the host's dispatch is not hidden under earlier work
    start, end, after = dev.event(), dev.event(), dev.event()
    start.record()
    out = run()
    end.record()
    dev.synchronize()   # device-wide: every stream, so work the call left elsewhere ends before `after`
    after.record()
    return out, (start, end, after)


def held_probe(dev, replay: Callable[[], object], hold_ms: float, flush=None):
    """One replay with its start held (lab.measure.timed's docstring): L2 flushed and the GPU idle, then
    `opened`, a hold of about `hold_ms` and `start`, the replay, `end` queued behind it; then the
    device-wide synchronize and `after`. Returns (opened, (start, end, after), host enqueue ms: the host's
    clock from before `opened` was queued to after `end` was)."""
    if flush is not None:
        flush.evict()   # evict the inputs from L2 so every repetition reads them from DRAM
    dev.synchronize()
    opened, start, end, after = dev.event(), dev.event(), dev.event(), dev.event()
    t0 = dev.host_ms()
    opened.record()
    dev.hold(hold_ms)
    start.record()   # stamped when the hold ends: by then the replay is queued behind it (the proof checks it)
    replay()
    end.record()
    enqueue_ms = dev.host_ms() - t0
    dev.synchronize()
    after.record()
    return opened, (start, end, after), enqueue_ms


def sync_latency(dev, probes: int = NOOP_PROBES) -> list[float]:
    """end -> after gaps of an empty call: the synchronize's own latency on this machine."""
    events = [probe_call(dev, lambda: None)[1] for _ in range(probes)]
    dev.synchronize()
    return [e.elapsed_time(a) for _, e, a in events]


def time_checked(call: Callable[[], object], *, prepare: Callable[[int], object] | None = None,
                 verify: Callable[[object, object], str | None] | None = None, floor=None, method: str = EVENTS,
                 reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP, l2_flush: bool = True,
                 budget_s: float | None = None, stream=None, what: str = "the call", device=None,
                 under_load_ms: float = 0.0) -> Timing:
    """Time `call` by `method` (events or graph) and return its Timing (peak_memory_bytes and checks
    filled), or raise TimingRefused. `under_load_ms` > 0: each repetition behind that long a stretch of
    the call back to back (UNDER_LOAD). `prepare(rep)` runs before every call outside the timed region
    and returns the token `verify(token, output)` receives with that call's output (None: passes;
    else the reason it is wrong); `floor` is a lab.measure.floor.Floor or None (unknown device).
    `budget_s`: size the repetitions to about this many seconds (lab.measure.bench.budget_reps);
    `stream`: where a graph is captured (the stream the call's autograd state lives on).
    """
    if method not in TIMING_METHODS:
        raise ValueError(f"unknown timing method {method!r}")
    dev = device or CudaDevice()
    run = _Run(Checked(call, prepare, verify, floor, what), dev, method, l2_flush, sync_latency(dev), under_load_ms)
    flush = dev.flush_buffer(L2_FLUSH_BYTES) if l2_flush else None
    per_call_ms = run.warm(warmup, budget_s)
    run.size_load(per_call_ms)
    run.prepare_method(stream)
    for i in range(budget_reps(per_call_ms, reps, budget_s)):
        run.rep(i, flush)
    return flushed_by(run.finish(), flush)


def time_checked_interleaved(specs: dict[str, Checked], reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
                             l2_flush: bool = True, device=None, under_load_ms: float = 0.0,
                             method: str = EVENTS) -> dict[str, Timing | TimingRefused]:
    """Several candidates by `method` (events: call latency; graph: device time, each candidate's call
    captured in its own graph and replayed behind a held start), repetition i running each once in an
    order rotated by i, so clock or thermal drift hits every candidate alike. Each gets its Timing or its
    TimingRefused. `under_load_ms`: each candidate's repetition behind a stretch of its own calls
    (UNDER_LOAD)."""
    if method not in TIMING_METHODS:
        raise ValueError(f"unknown timing method {method!r}")
    dev = device or CudaDevice()
    noop = sync_latency(dev)
    flush = dev.flush_buffer(L2_FLUSH_BYTES) if l2_flush else None
    runs: dict[str, _Run] = {}
    results: dict[str, Timing | TimingRefused] = {}
    for name, spec in specs.items():
        runs[name] = _Run(spec, dev, method, l2_flush, noop, under_load_ms)
        try:
            runs[name].size_load(runs[name].warm(warmup, None))
            runs[name].prepare_method()
        except TimingRefused as refused:
            results[name] = refused
    names = [n for n in specs if n not in results]
    for i in range(reps):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            if name in results:
                continue
            try:
                runs[name].rep(i, flush)
            except TimingRefused as refused:
                results[name] = refused
    for name in names:
        if name not in results:
            try:
                results[name] = flushed_by(runs[name].finish(), flush)
            except TimingRefused as refused:
                results[name] = refused
    return {name: results[name] for name in specs}
