"""The timer under load on a GEMM (no build needed): an 8192^3 fp16 matmul timed alone and behind 20, 50 and 200 ms of
itself, with what NVML read at each stretch's end (lab.measure.timed, UNDER LOAD). A quick look at whether the stretch
reaches the power limit and what clock the timed call starts from.

    python3 benchmarks/under_load_check.py
"""

import torch

from lab.measure.timed import time_checked

a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
print(torch.cuda.get_device_name(0))
print("| stretch ms | median ms | calls a stretch | SM MHz at the stretch's end | power-capped | reasons |")
print("| --- | --- | --- | --- | --- | --- |")
for ms in (0, 20, 50, 200):
    t = time_checked(lambda: a @ a, reps=10, warmup=3, under_load_ms=ms)
    c = t.checks
    print(f"| {ms} | {t.median:.4f} | {c['under_load_calls']} | {c['load_sm_clock_mhz']} | {c['load_power_capped_share']} "
          f"| {c['load_clock_event_reasons']} |", flush=True)
