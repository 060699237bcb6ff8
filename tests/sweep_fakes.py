"""A measurer for sweep tests on a machine without a GPU: deterministic times from each
implementation's rate, out of memory for standard attention past a size, no backward for rungs.
Handed to the lab as its sweep's measuring (lab.sweeping.Measuring): in-process as the click
context object, `main(obj=FAKE)`; as a process, `python -m tests.sweep_fakes ARGS` is `lab ARGS`
with FAKE injected, and FAKE's workers run `python -m tests.sweep_fakes --worker ...`.

These variables are the test's, read by this measurer only:
LAB_TEST_DIE=<part>:<n>  the worker whose journal part is <part> kills itself (SIGKILL) at its n-th cell
LAB_TEST_INTERRUPT=<n>   raise KeyboardInterrupt at the n-th cell (Ctrl-C)
LAB_TEST_SLOW=<part>:<s>,...  the worker whose journal part is <part> (* any) takes <s> seconds more a cell
LAB_TEST_BARRIER=<dir>:<n>  a worker waits at its first cell until <n> workers are at theirs (each has
                         taken a unit, however late the machine starts one)
LAB_TEST_GATES=<file>    each float64 gate checked appends `rung|dtype|mode|problem|pid` to <file>
LAB_TEST_GPU_CLOCKS=<i>:<MHz>,...  the SM clock the probe reads on "GPU" i (CUDA_VISIBLE_DEVICES=i)
LAB_TEST_DRIFT=<pct>     a cell's k-th pass times (1 + pct/100 * (k-1)) its first: drift between passes
LAB_TEST_REFUSE=<impl>:<k>  the k-th pass of each cell of <impl> is refused (a failed row, as the timer's
                         refusal of a cheat makes one)
LAB_TEST_ORDER=<file>    each call of a measurer appends `part|cell key` to <file> (the order passes ran)

A cell's times are as many repetitions as the plan of one pass asks (Plan.pass_plan().reps), spread
+-2% around its time, so a row's statistics pool its passes' real samples.

The fake GPU probe reads the worker's CUDA_VISIBLE_DEVICES (the parent pins a fake worker to the
index as given): GPU i is `GPU-fake-<i>`, so a test sees which worker's GPU measured each row.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from lab.measure.bench import summarize
from lab.measure.floor import attention_floor
from lab.measure.sweep import status_row, timed_row
from lab.measure.sweepplan import timing_methods
from lab.sweeping import Measuring

RATES_TFLOPS = {"sdpa-cudnn": 450.0, "sdpa-flash": 300.0, "sdpa-efficient": 130.0, "sdpa-math": 15.0,
                "standard": 14.0}
DEVICE = {"name": "Fake GPU (tests)", "compute_capability": "9.0", "sm_count": 132,
          "peaks": {"tensor_fp16_tflops": 989.4, "fp32_tflops": 66.9, "dram_tbps": 4.8}}
STANDARD_OOM_SCORES = 1 << 31      # B*H*N*N above this: standard attention "runs out of memory"


class FakeMeasurer:
    device = DEVICE
    software = {"python": "3", "torch": "fake", "cuda": None}

    def __init__(self, plan, part="main", gates=None):
        self.plan = plan
        self.part = part
        self.gates = gates
        self.count = 0
        self.seen: dict[str, int] = {}   # cell key -> passes measured (this is pass seen[key])

    def _barrier(self):
        """Hold this worker at its first cell until every worker has taken its first unit."""
        barrier = os.environ.get("LAB_TEST_BARRIER")
        if barrier and self.part != "main":
            folder, n = barrier.rsplit(":", 1)
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, self.part), "w").close()
            deadline = time.time() + 120
            while len(os.listdir(folder)) < int(n) and time.time() < deadline:
                time.sleep(0.02)

    def __call__(self, cell):
        self.count += 1
        self.seen[cell.key] = k = self.seen.get(cell.key, 0) + 1
        order = os.environ.get("LAB_TEST_ORDER")
        if order:
            with open(order, "a") as f:
                f.write(f"{self.part}|{cell.key}\n")
        if self.count == 1:
            self._barrier()
        die = os.environ.get("LAB_TEST_DIE")
        if die:
            part, n = die.split(":")
            if self.part == part and self.count >= int(n):
                os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("LAB_TEST_INTERRUPT") and self.count >= int(os.environ["LAB_TEST_INTERRUPT"]):
            raise KeyboardInterrupt
        slow = dict(item.split(":") for item in os.environ.get("LAB_TEST_SLOW", "").split(",") if ":" in item)
        if self.part in slow or "*" in slow:
            time.sleep(float(slow.get(self.part, slow.get("*"))))
        p = cell.problem
        if cell.impl in self.plan.rungs and cell.mode != "fwd":
            return [status_row(cell, "unsupported", f"{cell.impl} provides no backward launcher")]
        if cell.impl in self.plan.rungs and self.gates is not None:
            from lab.ladder import registry

            verdict = self.gates.verdict(registry.get(cell.impl), p, cell.mode)
            if not verdict.get("passed"):
                return [status_row(cell, "failed", "failed its float64 check (fake)")]
        if cell.impl == "standard" and p.batch * p.heads * p.seqlen_q * p.seqlen_k > STANDARD_OOM_SCORES:
            return [status_row(cell, "oom", "out of memory (fake)")]
        rate = RATES_TFLOPS.get(cell.impl, 320.0) * (0.5 if cell.mode != "fwd" else 1.0)
        ms = cell.problem.forward_flops * {"fwd": 1, "bwd": 2.5, "fwd+bwd": 3.5}[cell.mode] / (rate * 1e12) * 1e3 + 0.03
        drift = 1 + float(os.environ.get("LAB_TEST_DRIFT", "0")) / 100 * (k - 1)
        refuse = os.environ.get("LAB_TEST_REFUSE", "")
        rows = []
        # the lab's own choice of methods, from the cell's floor on this fake device (not from `ms`)
        floor = attention_floor(p, cell.mode, DEVICE["peaks"], DEVICE["name"])
        methods = timing_methods(self.plan.timing, floor, self.plan.l2_flush)
        for method in methods:
            if refuse == f"{cell.impl}:{k}":
                rows.append(status_row(cell, "failed", "refused (fake): the fastest repetition beat the floor", method))
                continue
            t = (ms - (0.025 if method == "graph" else 0.0)) * drift
            timing = summarize([t * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(self.plan.reps)], 2, True)
            timing.method = method
            scores = p.batch * p.heads * p.seqlen_q * p.seqlen_k * 2
            peak = scores * 2 if cell.impl in ("standard", "sdpa-math") else p.batch * p.heads * p.seqlen_q * p.head_dim * 2
            rows.append(timed_row(cell, timing, peak, DEVICE["peaks"]))
        return rows


def measure(plan, log=None, part="main", gates=None):
    return FakeMeasurer(plan, part, gates)


def check(variant, problem, mode):
    """A rung's float64 gate, passed; recorded where the test asks (to count how often it ran)."""
    log = os.environ.get("LAB_TEST_GATES")
    if log:
        with open(log, "a") as f:
            f.write(f"{variant.id}|{problem.dtype}|{mode}|{problem.label()}|{os.getpid()}\n")
    return {"passed": True}


def probe():
    """Which fake GPU this process measures on, as lab.environment.gpu_record says it of a real one."""
    index = os.environ.get("CUDA_VISIBLE_DEVICES", "0")
    clocks = dict(item.split(":") for item in os.environ.get("LAB_TEST_GPU_CLOCKS", "").split(",") if ":" in item)
    return {"gpu_name": DEVICE["name"], "gpu_uuid": f"GPU-fake-{index}", "cuda_visible_devices": index,
            "gpu_host_index": int(index) if index.isdigit() else None,
            "sm_clock_mhz": int(clocks[index]) if index in clocks else 1980, "mem_clock_mhz": 2619,
            "power_limit_w": 700.0, "gpu_probe_source": "nvml"}


PROGRAM = (sys.executable, "-m", "tests.sweep_fakes")
FAKE = Measuring(make=measure, worker=PROGRAM, on_gpu=False, check=check, probe=probe)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        from lab.sweeping import worker_main

        sys.exit(worker_main(sys.argv[1:], FAKE))
    from lab.cli import main

    main(obj=FAKE, prog_name="lab")
