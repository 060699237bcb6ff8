"""A measurer for sweep tests on a machine without a GPU: deterministic times from each
implementation's rate, out of memory for standard attention past a size, no backward for rungs.
Handed to the lab as its sweep's measuring (lab.sweeping.Measuring): in-process as the click
context object, `main(obj=FAKE)`; as a process, `python -m tests.sweep_fakes ARGS` is `lab ARGS`
with FAKE injected, and FAKE's workers run `python -m tests.sweep_fakes --worker ...`.

These variables are the test's, read by this measurer only:
LAB_TEST_DIE=<part>:<n>  the worker whose journal part is <part> kills itself (SIGKILL) at its n-th cell
LAB_TEST_INTERRUPT=<n>   raise KeyboardInterrupt at the n-th cell (Ctrl-C)
"""

from __future__ import annotations

import os
import signal
import sys

from lab.measure.bench import summarize
from lab.measure.sweep import status_row, timed_row
from lab.sweeping import Measuring

RATES_TFLOPS = {"sdpa-cudnn": 450.0, "sdpa-flash": 300.0, "sdpa-efficient": 130.0, "sdpa-math": 15.0,
                "standard": 14.0}
DEVICE = {"name": "Fake GPU (tests)", "compute_capability": "9.0", "sm_count": 132,
          "peaks": {"tensor_fp16_tflops": 989.4, "fp32_tflops": 66.9, "dram_tbps": 4.8}}
STANDARD_OOM_SCORES = 1 << 31      # B*H*N*N above this: standard attention "runs out of memory"


class FakeMeasurer:
    device = DEVICE
    software = {"python": "3", "torch": "fake", "cuda": None}

    def __init__(self, plan, part="main"):
        self.plan = plan
        self.part = part
        self.count = 0

    def __call__(self, cell):
        self.count += 1
        die = os.environ.get("LAB_TEST_DIE")
        if die:
            part, n = die.split(":")
            if self.part == part and self.count >= int(n):
                os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("LAB_TEST_INTERRUPT") and self.count >= int(os.environ["LAB_TEST_INTERRUPT"]):
            raise KeyboardInterrupt
        p = cell.problem
        if cell.impl in self.plan.rungs and cell.mode != "fwd":
            return [status_row(cell, "unsupported", f"{cell.impl} provides no backward launcher")]
        if cell.impl == "standard" and p.batch * p.heads * p.seqlen_q * p.seqlen_k > STANDARD_OOM_SCORES:
            return [status_row(cell, "oom", "out of memory (fake)")]
        rate = RATES_TFLOPS.get(cell.impl, 320.0) * (0.5 if cell.mode != "fwd" else 1.0)
        ms = cell.problem.forward_flops * {"fwd": 1, "bwd": 2.5, "fwd+bwd": 3.5}[cell.mode] / (rate * 1e12) * 1e3 + 0.03
        rows = []
        methods = ["events", "graph"] if self.plan.timing == "both" or (self.plan.timing == "auto" and ms < 0.5) else \
            [self.plan.timing if self.plan.timing != "auto" else "events"]
        for method in methods:
            t = ms - (0.025 if method == "graph" else 0.0)
            timing = summarize([t * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(10)], 2, True)
            timing.method = method
            scores = p.batch * p.heads * p.seqlen_q * p.seqlen_k * 2
            peak = scores * 2 if cell.impl in ("standard", "sdpa-math") else p.batch * p.heads * p.seqlen_q * p.head_dim * 2
            rows.append(timed_row(cell, timing, peak, DEVICE["peaks"]))
        return rows


def measure(plan, log=None, part="main"):
    return FakeMeasurer(plan, part)


PROGRAM = (sys.executable, "-m", "tests.sweep_fakes")
FAKE = Measuring(make=measure, worker=PROGRAM, on_gpu=False)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        from lab.sweeping import worker_main

        sys.exit(worker_main(sys.argv[1:], FAKE))
    from lab.cli import main

    main(obj=FAKE, prog_name="lab")
