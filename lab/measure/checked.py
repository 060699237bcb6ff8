"""THE one measurement of the lab: what is timed, on which inputs, held to what. `lab bench`,
`lab profile`, `lab sweep`, `lab tune` and the SDPA baselines all measure through `Measurement`;
nothing else in the lab times a call.

A Measurement is one implementation (lab.measure.call.Attention: a rung or a baseline) on one problem
in one mode, and composes:
  inputs    a Workload's seeded input sets (lab.measure.rotation), refilled into the same slots
            before every call, outside the timed region, each rolled over its batch and K/V heads so
            that no two calls of a measurement read the same values (up to sets x B x Hkv calls): Q, K,
            V for fwd; Q, K, V and dO for fwd+bwd; for a rung's bwd, Q, K, V, dO and the O and LSE the
            rung's own forward made from that set (computed once per set before timing, rolled with it);
  check     every call's output, warm-up and timed, against its own set's float64 reference, rolled
            as its inputs were: O for fwd (rotation.OutputCheck), dQ, dK, dV for bwd and fwd+bwd
            (rotation.GradientCheck), each reference made once per set and shared by every
            implementation timed on the Workload;
  floor     the problem's physical floor in that mode on this device (lab.measure.floor);
  timer     lab.measure.timed, by CUDA events or CUDA-graph replays, with its refusals.
Baselines are the reference: their outputs are not checked (verify=False). A baseline's `bwd` times
autograd's backward of one forward done before timing: its saved tensors cannot be refilled (autograd
refuses inputs changed in place), so it runs on one fixed set; its fwd and fwd+bwd rotate like a rung's.
"""

from __future__ import annotations

import contextlib

from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP, EVENTS, GRAPH, L2_FLUSH_BYTES, Timing
from lab.measure.call import Attention, make_call, rung
from lab.measure.floor import Floor, attention_floor
from lab.measure.kernelsplit import KERNEL_CALLS, KernelSplitFailed, call_work, split
from lab.measure.problem import Problem
from lab.measure.rotation import (DEFAULT_SETS, GradientCheck, OutputCheck, RotatingInputs, gradient_sets,
                                  problem_inputs)
from lab.measure.timed import Checked, CudaDevice, time_checked


def device_floor(problem: Problem, mode: str = "fwd", peaks: dict | None = None) -> Floor | None:
    """The floor of `problem` in `mode` on the current CUDA device (`peaks`: device_info()'s, when the
    caller has them; else looked up by the device's name)."""
    import torch

    name = torch.cuda.get_device_name()
    return attention_floor(problem, mode, peaks or None, device=name)


class Workload:
    """One problem's seeded input sets in one layout, and their references, made once when first
    needed and shared by every implementation measured on it (a sweep's cells of one shape)."""

    def __init__(self, problem: Problem, layout: str = "BHND", sets: int = DEFAULT_SETS, seed: int = 0,
                 device: str = "cuda"):
        self.problem, self.layout = problem, layout
        self.forward = problem_inputs(problem, sets, seed, device, layout)
        self._backward: RotatingInputs | None = None
        self._output_check: OutputCheck | None = None
        self._gradient_check: GradientCheck | None = None

    @property
    def backward(self) -> RotatingInputs:
        """Q, K, V and each set's own dO."""
        if self._backward is None:
            self._backward = RotatingInputs(gradient_sets(self.forward), moves=self.forward.moves,
                                            key=(*self.forward.key, "dO"))
        return self._backward

    def output_check(self) -> OutputCheck:
        if self._output_check is None:
            self._output_check = OutputCheck(self.problem, self.forward, layout=self.layout)
        return self._output_check

    def gradient_check(self) -> GradientCheck:
        if self._gradient_check is None:
            self._gradient_check = GradientCheck(self.problem, self.backward.sets, layout=self.layout)
        return self._gradient_check


class Measurement:
    """`impl` on `workload.problem` in `mode`: its inputs, check, floor and what it is called."""

    def __init__(self, impl: Attention, workload: Workload, mode: str = "fwd", *, verify: bool = True,
                 floor: Floor | None = None, what: str | None = None):
        if impl.layout != workload.layout:
            raise ValueError(f"{impl.name} reads {impl.layout}; the workload is {workload.layout}")
        self.impl, self.workload, self.mode, self.floor = impl, workload, mode, floor
        self.what = what or impl.name
        problem = workload.problem
        self.verify = None
        if mode == "fwd":
            self.inputs = workload.forward
            if verify:
                self.verify = workload.output_check()
        elif mode == "bwd" and impl.backward is None:   # autograd's saved tensors: one fixed set (see above)
            self.inputs = RotatingInputs([workload.forward.sets[0]], fixed=True)
            if verify:
                raise ValueError(f"{impl.name}'s bwd runs autograd on one fixed set: it cannot be checked per call")
        else:
            self.inputs = workload.backward
            if mode == "bwd":   # each set's O and LSE from the rung's own forward, made once
                import torch

                with torch.no_grad():
                    sets = [(q, k, v, dout, *impl.forward_lse(q, k, v)) for q, k, v, dout in workload.backward.sets]
                self.inputs = RotatingInputs(sets, moves=workload.forward.moves,
                                             key=(*workload.backward.key, "O, LSE of", impl.name))
            if verify:
                self.verify = workload.gradient_check()
        self.problem = problem

    @property
    def prepare(self):
        return None if self.inputs.count == 1 else self.inputs.prepare

    def call(self):
        """A zero-argument call of the mode on the slots (make it inside the stream a graph is captured on)."""
        slots = self.inputs.slots
        if self.mode == "fwd" or self.impl.backward is None and self.mode == "bwd":
            return make_call(self.impl, *slots[:3], self.mode)
        if self.mode == "fwd+bwd":
            return make_call(self.impl, *slots[:3], self.mode, dout=slots[3])
        backward = self.impl.backward
        return lambda: backward(*slots[:3], slots[4], slots[3], slots[5])   # q, k, v, o, dout, lse

    def checked(self, what: str | None = None) -> Checked:
        """The timer's spec, for lab.measure.timed.time_checked_interleaved (events)."""
        return Checked(self.call(), self.prepare, self.verify, self.floor, what or self.what)

    def time(self, method: str = EVENTS, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP,
             l2_flush: bool = True, budget_s: float | None = None, device=None, under_load_ms: float = 0.0) -> Timing:
        """Timed and checked (raises lab.measure.timed.TimingRefused); inside the implementation's
        context (SDPA's backend pin), a graph's call made and captured on a stream of its own.
        `device`: the timer's device (tests hand in a simulated one; then no CUDA stream is made).
        `under_load_ms`: each repetition behind that long a stretch of the call (lab.measure.timed, UNDER LOAD)."""
        stream = None
        if method == GRAPH and device is None:
            import torch

            stream = torch.cuda.Stream()
        with self.impl.context(), (_on(stream) if stream is not None else contextlib.nullcontext()):
            call = self.call()
            timing = time_checked(call, prepare=self.prepare, verify=self.verify, floor=self.floor, method=method,
                                  reps=reps, warmup=warmup, l2_flush=l2_flush, budget_s=budget_s, stream=stream,
                                  what=self.what, device=device, under_load_ms=under_load_ms)
            del call
        return timing


    def kernel_split(self, calls: int = KERNEL_CALLS, l2_flush: bool = True, device=None) -> dict:
        """Where the call's device time goes, kernel by kernel (lab.measure.kernelsplit): `calls` calls of
        the mode, made as time() makes them (the same slots, the current stream, the implementation's
        context), traced under CUPTI, each loaded, L2 flushed and started on an idle GPU as a timed
        repetition is, its output checked as the timer checks it. Run it after time(): the calls are
        warm. Raises KernelSplitFailed where the trace gives no split, TimingRefused on a wrong output."""
        dev = device or CudaDevice()
        flush = dev.flush_buffer(L2_FLUSH_BYTES) if l2_flush else None
        with self.impl.context():
            call = self.call()
            try:
                traced = dev.trace_calls(call, self.prepare, calls, flush, self.verify)
            except RuntimeError as e:   # the profiler could not start (CUPTI held by another tool), out of memory
                why = str(e).strip()[:200]
                raise KernelSplitFailed(f"tracing {calls} calls under torch.profiler failed: {why}") from e
            finally:
                del call, flush
        if len(traced) != calls:
            raise KernelSplitFailed(f"the trace of {calls} calls lost its markers (CUPTI dropped records)")
        return split(call_work(traced))


def _on(stream):
    import torch

    return torch.cuda.stream(stream)


def describe(name: str, problem: Problem, mode: str) -> str:
    return f"{name} on {problem.label()}" + ("" if mode == "fwd" else f" {mode}")


def time_rung(variant, module, problem: Problem, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP, *,
              method: str = EVENTS, l2_flush: bool = True, budget_s: float | None = None, peaks: dict | None = None,
              sets: int = DEFAULT_SETS, seed: int = 0, mode: str = "fwd") -> Timing:
    """A rung on `problem` in `mode`, in its own layout, measured (see Measurement); raises TimingRefused."""
    m = rung_measurement(variant, module, problem, mode=mode, peaks=peaks, sets=sets, seed=seed)
    return m.time(method, reps, warmup, l2_flush, budget_s)


def rung_measurement(variant, module, problem: Problem, *, mode: str = "fwd", peaks: dict | None = None,
                     sets: int = DEFAULT_SETS, seed: int = 0) -> Measurement:
    """The Measurement time_rung times: a caller that also wants the kernel split keeps it."""
    workload = Workload(problem, variant.layout, sets, seed)
    return Measurement(rung(variant, module, problem), workload, mode, floor=device_floor(problem, mode, peaks),
                       what=describe(variant.id, problem, mode))
