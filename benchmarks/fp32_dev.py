"""fp32 rungs (v3_unrolled, v4_double_buffer) iteration script: tuning candidates, checked, then timed.

Two halves, so that no GPU time goes into compiling:

    python benchmarks/fp32_dev.py compile            # CPU machine: nvcc -> build/fp32_dev/lib{v3,v4}_tuning.so
    python benchmarks/fp32_dev.py run                # GPU machine: check every candidate, then time them

`compile` builds each rung's .cu with -DLAB_V<n>_TUNING into a plain shared library (static cudart,
sm_90a SASS, the flags of lab/ladder/build.py); `run` loads it with ctypes and calls the C launchers of
kernels/common.cuh directly on torch tensors and torch's current stream: `lab_forward_v<n>` (the
rung's default configs, every D) and `lab_forward_v<n>_config` (a candidate of that head_dim, by
index). `--candidates v4` tunes only v4 (the other rungs run their defaults); `--twice` times each
default twice, so the spread of one kernel's two medians shows the noise floor.

Correctness first: every candidate and every default config is checked against lab.measure.check's float64
reference (rel_err <= 1e-4, output poisoned with NaN) on ragged, causal and seqlen_q != seqlen_k
shapes; a candidate that fails is not timed. Timing: CUDA events around each launch, an L2 flush
before each repetition, warm-up first, candidates round-robin (rep 1 of each, rep 2 of each, ...)
so drift hits all alike; median and min of --reps. SDPA in fp32 (its efficient backend; flash and
cuDNN refuse fp32) is timed in the same loop. TFLOP/s = 4*B*H*N^2*D / time, halved for causal.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB_DIR = ROOT / "build" / "fp32_dev"
RUNGS = {"v3": "v3_unrolled.cu", "v4": "v4_double_buffer.cu"}
# Candidate configs in each rung's launch_tuning(), per head_dim, by index: keep in step with the
# .cu files (tests/test_ladder_fp32_gpu.py compares them). TM x TN thread tile, threads per CTA,
# __launch_bounds__ min CTAs/SM, unroll factors of the d loop and the key loop, (p16) P staged in
# shared memory 16 keys at a time instead of the whole key tile, and (v4 only) the K/V schedule:
# none named = one sK and one sV with K and V interleaved (FlashAttention-2), s2 = two stages of each,
# mb = the interleaved buffers and copy order synchronized by split-phase mbarriers.
TUNE_CONFIGS = {
    "v3": {
        32: ["TM8 TN8 T128 min2 u4,2", "TM8 TN8 T128 min2 u1,1", "TM8 TN8 T128 min2 u2,2"],
        64: ["TM8 TN8 T128 min2 u1,2", "TM8 TN8 T128 min2 u2,2", "TM8 TN8 T256 min1 u1,2",
             "TM8 TN8 T128 min2 u2,1"],
        128: ["TM4 TN4 T128 min2 u4,2", "TM4 TN4 T128 min2 u1,1", "TM4 TN4 T128 min2 u2,2"],
    },
    "v4": {
        32: ["TM8 TN8 T128 min2 u4,2 s2", "TM8 TN8 T128 min2 u4,2", "TM8 TN8 T128 min2 u1,2 mb"],
        64: ["TM8 TN8 T128 min2 u2,2", "TM8 TN8 T128 min2 u2,4", "TM8 TN8 T128 min2 u4,2",
             "TM8 TN8 T128 min2 u1,4", "TM8 TN8 T128 min2 u1,2",
             "TM8 TN8 T128 min2 u2,2 mb", "TM8 TN4 T128 min2 u4,2 s2"],
        128: ["TM4 TN4 T128 min2 u4,2 mb", "TM4 TN4 T128 min2 u4,2", "TM4 TN4 T128 min2 u4,2 s2"],
    },
}
# (B, H, N, D): the default shape and the SDPA target at D=64, causal and not; D=32 and D=128 at N=2048.
BENCH_SHAPES = [(8, 16, 1024, 64), (8, 16, 2048, 64), (8, 16, 2048, 32), (8, 16, 2048, 128)]
FP32_FFMA_PEAK_TFLOPS = 66.9  # H100/H200 SXM datasheet: 132 SMs x 128 FFMA/clk x 2 x 1.98 GHz


# ---------------------------------------------------------------------------------------------
# compile (CPU machine)
# ---------------------------------------------------------------------------------------------

def compile_libs(arch: str = "sm_90a") -> None:
    LIB_DIR.mkdir(parents=True, exist_ok=True)
    for vid, src in RUNGS.items():
        out = LIB_DIR / f"lib{vid}_tuning.so"
        cmd = ["nvcc", "-shared", "-Xcompiler", "-fPIC", "-O3", "-lineinfo", "-std=c++17",
               f"-gencode=arch=compute_{arch[3:]},code={arch}", "-Xptxas", "-v", f"-DLAB_{vid.upper()}_TUNING",
               "-I", str(ROOT / "kernels"), "-o", str(out), str(ROOT / "kernels" / src)]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"nvcc failed for {src}:\n{res.stderr}")
        spilled = sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", res.stderr))
        regs = sorted({int(n) for n in re.findall(r"Used (\d+) registers", res.stderr)})
        print(f"{out.relative_to(ROOT)}: {time.perf_counter() - t0:.1f} s, registers {regs}, "
              f"{spilled} bytes spilled", flush=True)


# ---------------------------------------------------------------------------------------------
# run (GPU machine)
# ---------------------------------------------------------------------------------------------

class LabAttentionArgs(ctypes.Structure):  # kernels/common.cuh, field for field
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("batch", ctypes.c_int), ("heads", ctypes.c_int), ("seqlen_q", ctypes.c_int),
                ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int), ("causal", ctypes.c_int),
                ("softmax_scale", ctypes.c_float), ("dtype", ctypes.c_int)]


class Rung:
    """One rung's tuning library: launch(q, k, v, o, causal, config=None)."""

    def __init__(self, vid: str):
        self.vid = vid
        self.lib = ctypes.CDLL(str(LIB_DIR / f"lib{vid}_tuning.so"))
        self.default = getattr(self.lib, f"lab_forward_{vid}")
        self.default.argtypes = [ctypes.POINTER(LabAttentionArgs), ctypes.c_void_p]
        self.default.restype = ctypes.c_char_p
        self.config = getattr(self.lib, f"lab_forward_{vid}_config")
        self.config.argtypes = [ctypes.POINTER(LabAttentionArgs), ctypes.c_void_p, ctypes.c_int]
        self.config.restype = ctypes.c_char_p

    def launch(self, q, k, v, o, causal: bool, config: int | None = None) -> None:
        """config None: the rung's default for this head_dim; else an index into TUNE_CONFIGS[vid][D]."""
        import torch

        b, h, nq, d = q.shape
        args = LabAttentionArgs(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), b, h, nq, k.shape[2], d,
                                int(causal), d ** -0.5, 0)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        err = self.default(ctypes.byref(args), stream) if config is None else self.config(ctypes.byref(args), stream,
                                                                                           config)
        if err is not None:
            raise RuntimeError(err.decode())


def name_of(vid: str, config: int | None, head_dim: int = 64) -> str:
    return f"{vid} default" if config is None else f"{vid} c{config} ({TUNE_CONFIGS[vid][head_dim][config]})"


def check(rung: Rung, config: int | None, shapes, head_dim: int = 64) -> tuple[bool, float]:
    import torch

    from lab.measure import check as gate
    from lab.measure.problem import make_inputs, softmax_scale

    worst, ok = 0.0, True
    for p in shapes:
        q, k, v = make_inputs(p, gate.shape_seed(11, p), device="cuda")
        o = torch.full_like(q, float("nan"))
        try:
            rung.launch(q, k, v, o, p.causal, config)
            torch.cuda.synchronize()
        except RuntimeError as e:
            print(f"  {name_of(rung.vid, config, head_dim)} {p.label()}: {e}")
            return False, float("nan")
        ref = gate.reference_attention(q, k, v, p.causal, softmax_scale(p), device="cpu" if p.seqlen_q < 1200 else None)
        err = gate.compare(o, ref)
        good = gate.judge(err, gate.FP32_REL_TOL)
        worst = max(worst, err["rel_err"]) if good else float("nan")
        if not good:
            print(f"  FAIL {name_of(rung.vid, config, head_dim)} {p.label()}: rel_err {err['rel_err']:.3e}, "
                  f"{err['nonfinite']} non-finite")
            ok = False
    return ok, worst


def dev_shapes(head_dims):
    from lab.measure.problem import Problem

    pairs = [(1, 1), (17, 17), (100, 100), (129, 129), (1000, 1000), (1023, 1023), (17, 300), (300, 17),
             (1023, 1000), (130, 1023), (1, 700), (700, 1)]
    return [Problem(2, 3, nq, nk, d, causal) for (nq, nk), d, causal in itertools.product(pairs, head_dims, (False, True))]


class Timer:
    def __init__(self, reps: int, warmup: int):
        import torch

        self.reps, self.warmup = reps, warmup
        self.flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")  # > 4x the 60 MB L2

    def __call__(self, entries: dict) -> dict:
        import torch

        for fn in entries.values():
            for _ in range(self.warmup):
                fn()
        events = {name: [] for name in entries}
        for _ in range(self.reps):
            for name, fn in entries.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                self.flush.zero_()
                start.record()
                fn()
                end.record()
                events[name].append((start, end))
        torch.cuda.synchronize()
        return {name: sorted(s.elapsed_time(e) for s, e in pairs) for name, pairs in events.items()}


def run(args) -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lab.measure.problem import Problem, make_inputs

    if not torch.cuda.is_available():
        sys.exit("run needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}", flush=True)
    rungs = {vid: Rung(vid) for vid in args.rungs.split(",")}
    tuned = set(args.candidates.split(",")) if args.candidates else set(rungs)

    # Correctness gates timing: defaults on every D, each candidate on its own D.
    passed = {}
    t0 = time.perf_counter()
    for vid, rung in rungs.items():
        ok, worst = check(rung, None, dev_shapes((32, 64, 128)))
        passed[(vid, None)] = ok
        print(f"check {vid} default: {'ok' if ok else 'FAILED'}, worst rel_err {worst:.2e}", flush=True)
        for d, configs in TUNE_CONFIGS[vid].items():
            for config in range(len(configs) if vid in tuned else 0):
                ok, worst = check(rung, config, dev_shapes((d,)), d)
                passed[(vid, d, config)] = ok
                print(f"check {name_of(vid, config, d)} D={d}: {'ok' if ok else 'FAILED'}, worst rel_err {worst:.2e}",
                      flush=True)
    print(f"checks took {time.perf_counter() - t0:.1f} s", flush=True)
    if args.check_only:
        return 0 if all(passed.values()) else 1

    timer = Timer(args.reps, args.warmup)
    for (b, h, n, d), causal in itertools.product(BENCH_SHAPES, (False, True)):
        if d not in args.head_dims:
            continue
        if d != 64 and causal:
            continue  # D=32/128: non-causal only, to choose their defaults
        p = Problem(b, h, n, n, d, causal)
        q, k, v = make_inputs(p, seed=1234, device="cuda")
        o = torch.empty_like(q)
        entries = {}
        with torch.no_grad():
            def sdpa(q=q, k=k, v=v, causal=causal):
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            entries["sdpa efficient fp32"] = sdpa
            for vid, rung in rungs.items():
                for config in [None, *range(len(TUNE_CONFIGS[vid][d]) if vid in tuned else 0)]:
                    if passed[(vid, None) if config is None else (vid, d, config)]:
                        entries[name_of(vid, config, d)] = (
                            lambda r=rung, c=config, t=(q, k, v, o): r.launch(*t, causal, c))
                if args.twice and passed[(vid, None)]:
                    # The same launch again, as its own entry: the spread between the two medians is
                    # the noise floor a candidate's gain must exceed.
                    entries[f"{vid} default (2nd)"] = lambda r=rung, t=(q, k, v, o): r.launch(*t, causal, None)
            times = timer(entries)
        sdpa_ms = statistics.median(times["sdpa efficient fp32"])
        print(f"\n{p.label()}  ({p.flops / 1e9:.1f} GFLOP)", flush=True)
        print(f"  {'candidate':<44} {'median ms':>10} {'min ms':>8} {'TFLOP/s':>8} {'% FFMA':>7} {'x SDPA':>7}")
        for name, ms in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
            med = statistics.median(ms)
            tflops = p.flops / med / 1e9
            print(f"  {name:<44} {med:>10.3f} {ms[0]:>8.3f} {tflops:>8.2f} {100 * tflops / FP32_FFMA_PEAK_TFLOPS:>6.1f}%"
                  f" {sdpa_ms / med:>7.2f}")
        del q, k, v, o
    return 0 if all(passed.values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="CPU machine: build the tuning libraries with nvcc")
    c.add_argument("--arch", default="sm_90a")
    r = sub.add_parser("run", help="GPU machine: check, then time, every candidate")
    r.add_argument("--rungs", default="v3,v4")
    r.add_argument("--reps", type=int, default=15)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--check-only", action="store_true")
    r.add_argument("--candidates", default=None,
                   help="rungs whose tuning candidates are checked and timed (default: all of --rungs); "
                        "the others run their defaults only")
    r.add_argument("--twice", action="store_true", help="time each rung's default twice (the noise floor)")
    r.add_argument("--head-dims", type=lambda t: [int(x) for x in t.split(",")], default=[32, 64, 128],
                   help="time only these head_dims (all are checked)")
    args = ap.parse_args()
    if args.cmd == "compile":
        compile_libs(args.arch)
        return 0
    sys.path.insert(0, str(ROOT))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
