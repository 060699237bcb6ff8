"""Development loop of a backward rung (issue 19, item 5; v8: issue 27), run on the GPU machine.
`--rung v8` works on another backward rung than v7 (the default).

    python3 benchmarks/v7_dev.py check              # forward O/LSE and backward dQ/dK/dV vs float64 autograd
    python3 benchmarks/v7_dev.py bench [--quick]    # backward: rung vs SDPA flash (FA2) vs SDPA cuDNN, fa-grid
    python3 benchmarks/v7_dev.py sanitize           # small shapes, for compute-sanitizer memcheck / racecheck
    python3 benchmarks/v7_dev.py tune               # the rung's backward tuning candidates on a few grid cells
    python3 benchmarks/v7_dev.py profile --shape B,H,N,D [--tuning]   # one backward call each: ncu's workload

The rung is built through the lab's own build (lab.ladder.build), so what is checked and timed is
what `lab check` / `lab bench` load. Correctness rule (the lab's: issue 4's and v5's): for every
output tensor, max |rung - ref| <= 2 x max |SDPA(same dtype) - ref|, ref in float64 autograd, causal
aligned top-left as torch, floored at one rounding step of the dtype at max |ref|. Timing: CUDA events
around each call on an idle GPU, L2 flushed before each repetition (lab.measure.timed.time_checked),
median; backward FLOPs = 2.5 x 4 B H Nq Nk D, halved when causal (FlashAttention's convention).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lab.ladder import build, registry  # noqa: E402
from lab.measure.timed import time_checked  # noqa: E402

RUNG = "v7"
TOKENS, HIDDEN = 16384, 2048
GRID_N = (512, 1024, 2048, 4096, 8192, 16384)


def rung_module(tuning: bool = False):
    return build.build(registry.get(RUNG), tuning=tuning).module


def backward_names(mod, d: int, tuning: bool) -> list[tuple[str, int | None]]:
    """The timed rows' names: the rung's id, or id[candidate label]."""
    return [(RUNG if cfg is None else f"{RUNG}[{label}]", cfg) for label, cfg in backward_variants(mod, d, tuning)]


def backward_variants(mod, d: int, tuning: bool) -> list[tuple[str, int | None]]:
    """("default", None), then each backward tuning candidate (label, index) when `tuning`."""
    out = [("default", None)]
    if tuning:
        out += [(label, i) for i, label in enumerate(mod.backward_configs(d, "float16"))]
    return out


# --------------------------------------------------------------------------- correctness

def reference(q, k, v, dout, causal, scale):
    """float64 autograd: O, LSE and dQ, dK, dV (top-left causal, as torch SDPA)."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        nq, nk = s.shape[-2:]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ v
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout.double())
    return o.detach(), lse.detach(), dq, dk, dv


def sdpa_grads(q, k, v, dout, causal, scale):
    """torch SDPA in the inputs' dtype (its own choice of backend; an explicit top-left mask where
    Nq != Nk, so no backend may read `is_causal` bottom-right)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    nq, nk = q.shape[-2], k.shape[-2]
    if causal and nq != nk:
        mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout)
    return o.detach(), dq, dk, dv


def rung_forward_backward(mod, q, k, v, dout, causal, scale, config=None):
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    mod.forward(q, k, v, o, causal, scale, lse)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    if config is None:
        mod.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, scale)
    else:
        mod.backward_config(q, k, v, o, dout, lse, dq, dk, dv, causal, scale, config)
    return o, lse, dq, dk, dv


def check_shapes():
    """(B, H, Nq, Nk, D, causal, dtype, std): FlashAttention's ragged pairs, N = 1, odd N, B*H in
    the hundreds, and large logits (std 4 inputs: scores ~16x the unit case)."""
    pairs = [(1, 1, 1, 1), (2, 3, 17, 17), (1, 2, 113, 203), (1, 2, 203, 113), (2, 3, 1023, 1024),
             (1, 2, 1, 239), (1, 2, 239, 1), (2, 2, 128, 128), (1, 3, 1000, 1000), (4, 64, 129, 97),
             (1, 2, 300, 700), (1, 1, 2049, 2049)]
    out = []
    for i, (b, h, nq, nk) in enumerate(pairs):
        for d in (64, 128):
            for causal in (False, True):
                dtype = (torch.float16, torch.bfloat16)[(i + d // 64 + causal) % 2]
                out.append((b, h, nq, nk, d, causal, dtype, 1.0))
    for d in (64, 128):
        for causal in (False, True):
            for dtype in (torch.float16, torch.bfloat16):
                out.append((2, 4, 257, 257, d, causal, dtype, 4.0))
    return out


def run_check(tuning: bool) -> int:
    mod = rung_module(tuning)
    failures = 0
    print(f"{'shape':38s} {'tensor':6s} {'max_err':>10s} {'tol':>10s}  ok")
    for (b, h, nq, nk, d, causal, dtype, std) in check_shapes():
        gen = torch.Generator(device="cuda").manual_seed(nq * 7 + nk * 13 + d + causal)
        mk = lambda n: (torch.randn(b, h, n, d, generator=gen, device="cuda") * std + 0.5).to(dtype)
        q, k, v = mk(nq), mk(nk), mk(nk)
        dout = torch.randn(b, h, nq, d, generator=gen, device="cuda").to(dtype)
        scale = d ** -0.5
        ro, rlse, rdq, rdk, rdv = reference(q, k, v, dout, causal, scale)
        so, sdq, sdk, sdv = sdpa_grads(q, k, v, dout, causal, scale)
        for cfg_label, cfg in backward_variants(mod, d, tuning):
            failures += check_one(mod, cfg_label, cfg, q, k, v, dout, causal, scale, (ro, rlse, rdq, rdk, rdv),
                                  (so, sdq, sdk, sdv), (b, h, nq, nk, d, causal, dtype, std))
    print(f"check: {failures} failure(s)")
    return 1 if failures else 0


def check_one(mod, cfg_label, cfg, q, k, v, dout, causal, scale, refs, sdpa, shape) -> int:
    (b, h, nq, nk, d, causal, dtype, std) = shape
    ro, rlse, rdq, rdk, rdv = refs
    so, sdq, sdk, sdv = sdpa
    failures = 0
    o, lse, dq, dk, dv = rung_forward_backward(mod, q, k, v, dout, causal, scale, cfg)
    torch.cuda.synchronize()
    eps = torch.finfo(dtype).eps
    label = f"B{b} H{h} Nq{nq} Nk{nk} D{d} {'causal' if causal else 'full'} {str(dtype)[6:]} std{std:g} [{cfg_label}]"
    for name, got, ref, sd in (("O", o, ro, so), ("dQ", dq, rdq, sdq), ("dK", dk, rdk, sdk), ("dV", dv, rdv, sdv)):
        err = (got.double() - ref).abs()
        worst = err.max().item() if torch.isfinite(err).all() else float("inf")
        sdpa_err = (sd.double() - ref).abs().max().item()
        tol = max(2.0 * sdpa_err, eps * ref.abs().max().item())
        ok = worst <= tol
        failures += not ok
        where = "" if ok else f"  worst at {tuple(int(i) for i in divmod_index(err))}"
        print(f"{label:38s} {name:6s} {worst:10.3e} {tol:10.3e}  {'ok' if ok else 'FAIL'}{where}")
    # LSE in fp32: against float64, relative to its magnitude (no SDPA counterpart on every backend).
    lerr = (lse.double() - rlse).abs().max().item()
    ltol = 1e-5 * max(1.0, rlse.abs().max().item()) * 4
    ok = lerr <= ltol
    failures += not ok
    print(f"{label:38s} {'LSE':6s} {lerr:10.3e} {ltol:10.3e}  {'ok' if ok else 'FAIL'}")
    return failures


def divmod_index(err):
    flat = int(torch.nan_to_num(err, nan=float("inf")).argmax())
    idx = []
    for s in reversed(err.shape):
        flat, r = divmod(flat, s)
        idx.append(r)
    return reversed(idx)


# --------------------------------------------------------------------------- timing

def bwd_flops(b, h, n, d, causal):
    return 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)


def sdpa_backward_fn(backend, q, k, v, dout, causal):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)


def rung_backward_fn(mod, q, k, v, dout, causal, config=None):
    scale = q.shape[-1] ** -0.5
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    mod.forward(q, k, v, o, causal, scale, lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if config is None:
        return lambda: mod.backward(q, k, v, o, dout, lse, dq, dk, dv, causal, scale)
    return lambda: mod.backward_config(q, k, v, o, dout, lse, dq, dk, dv, causal, scale, config)


def run_bench(quick: bool, reps: int, tuning: bool, dtypes_arg: str) -> int:
    mod = rung_module(tuning)
    rows = []
    dtypes = tuple(getattr(torch, t) for t in dtypes_arg.split(","))
    ns = (512, 4096, 16384) if quick else GRID_N
    for dtype in dtypes:
        for d in (64, 128):
            for n in ns:
                for causal in (False, True):
                    b, h = TOKENS // n, HIDDEN // d
                    gen = torch.Generator(device="cuda").manual_seed(n + d)
                    mk = lambda: (torch.randn(b, h, n, d, generator=gen, device="cuda") + 0.5).to(dtype)
                    q, k, v, dout = mk(), mk(), mk(), mk() - 0.5
                    times = {}
                    impls = [("fa2", sdpa_backward_fn(SDPBackend.FLASH_ATTENTION, q, k, v, dout, causal)),
                             ("cudnn", sdpa_backward_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, dout, causal))]
                    impls += [(name, rung_backward_fn(mod, q, k, v, dout, causal, cfg))
                              for name, cfg in backward_names(mod, d, tuning)]
                    for name, fn in impls:
                        try:
                            times[name] = time_checked(fn, reps=reps, warmup=3).median
                        except RuntimeError as e:  # a backend that refuses the shape: say so, keep going
                            print(f"  {name} B{b} H{h} N{n} D{d}: {str(e).splitlines()[0][:100]}")
                            times[name] = math.nan
                        torch.cuda.empty_cache()
                    rows.append((str(dtype)[6:], d, n, causal, times, bwd_flops(b, h, n, d, causal)))
                    del q, k, v, dout
    print("\nbackward, fa-grid (16k tokens, hidden 2048), median ms | TFLOP/s | rung / FA2, rung / cuDNN")
    print(f"{'dtype':9s} {'D':>4s} {'N':>6s} {'causal':>6s} {RUNG + ' ms':>8s} {'FA2 ms':>8s} {'cuDNN ms':>8s} "
          f"{RUNG + ' TF':>6s} {'FA2 TF':>6s} {'cuDNN TF':>8s} {'vs FA2':>7s} {'vs cuDNN':>8s}")
    wins = 0
    for dtype, d, n, causal, t, fl in rows:
        tf = {k: fl / (ms * 1e-3) / 1e12 for k, ms in t.items()}
        r_fa2, r_cud = t["fa2"] / t[RUNG], t["cudnn"] / t[RUNG]
        wins += r_fa2 >= 1.0
        print(f"{dtype:9s} {d:4d} {n:6d} {str(causal):>6s} {t[RUNG]:8.3f} {t['fa2']:8.3f} {t['cudnn']:8.3f} "
              f"{tf[RUNG]:6.0f} {tf['fa2']:6.0f} {tf['cudnn']:8.0f} {r_fa2:6.2f}x {r_cud:7.2f}x")
    print(f"rung >= FA2 in {wins}/{len(rows)} cells")
    if tuning:
        print("\ncandidates, rung / FA2 (fp16 and bf16 rows as above):")
        for dtype, d, n, causal, t, fl in rows:
            cands = "  ".join(f"{k[3:-1]}: {t['fa2'] / ms:4.2f}x" for k, ms in t.items() if k.startswith(RUNG + "["))
            print(f"{dtype:9s} D{d:<4d} N{n:<6d} {'causal' if causal else 'full  '}  {cands}")
    return 0


def run_tune(reps: int) -> int:
    mod = rung_module(tuning=True)
    cells = [(64, 1024, False), (64, 16384, True), (128, 1024, False), (128, 16384, False), (128, 4096, True)]
    for d, n, causal in cells:
        labels = mod.backward_configs(d, "float16")
        b, h = TOKENS // n, HIDDEN // d
        mk = lambda: (torch.randn(b, h, n, d, device="cuda") + 0.5).half()
        q, k, v, dout = mk(), mk(), mk(), mk() - 0.5
        fl = bwd_flops(b, h, n, d, causal)
        fa2 = time_checked(sdpa_backward_fn(SDPBackend.FLASH_ATTENTION, q, k, v, dout, causal), reps=reps, warmup=3).median
        print(f"D{d} N{n} causal={causal}: FA2 {fa2:.3f} ms ({fl / fa2 / 1e9:.0f} TF)")
        for i, label in enumerate(labels):
            ms = time_checked(rung_backward_fn(mod, q, k, v, dout, causal, config=i), reps=reps, warmup=3).median
            print(f"   {label:24s} {ms:8.3f} ms {fl / ms / 1e9:6.0f} TF  {fa2 / ms:5.2f}x FA2")
    return 0


def run_sanitize(tuning: bool) -> int:
    """A few small ragged shapes, fwd + bwd, both dtypes: the workload compute-sanitizer inspects."""
    mod = rung_module(tuning)
    for (b, h, nq, nk, d, causal, dtype) in ((1, 2, 113, 203, 64, True, torch.float16),
                                              (1, 1, 203, 113, 128, False, torch.bfloat16),
                                              (1, 1, 130, 130, 128, True, torch.float16),
                                              (2, 1, 17, 70, 64, False, torch.bfloat16),
                                              # D=64 with three query blocks of 128: the steps after the
                                              # first (v8's overlap-next issues S^T a step ahead)
                                              (1, 1, 300, 129, 64, False, torch.float16)):
        mk = lambda n: (torch.randn(b, h, n, d, device="cuda") + 0.5).to(dtype)
        q, k, v, dout = mk(nq), mk(nk), mk(nk), mk(nq)
        for _, cfg in backward_variants(mod, d, tuning):   # --tuning: every backward candidate too
            rung_forward_backward(mod, q, k, v, dout, causal, d ** -0.5, cfg)
    torch.cuda.synchronize()
    print("sanitize workload done")
    return 0


def run_profile(tuning: bool, shape: str, causal: bool, dtype_name: str) -> int:
    """One forward + backward call of the default (and, with --tuning, of each backward candidate) on
    one shape: the workload for Nsight Compute on candidates `lab profile` does not reach (it profiles
    the default launcher), e.g. `ncu -k regex:bwd_kernel ... v7_dev.py profile --rung v8 --tuning`;
    each candidate's kernel is told apart by its configuration in the demangled name."""
    try:
        b, h, n, d = (int(x) for x in shape.split(","))
        dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype_name]
        if min(b, h, n, d) < 1:
            raise ValueError
    except (ValueError, KeyError):
        print(f"profile: --shape B,H,N,D of positive integers and --dtype float16 or bfloat16 (got {shape!r}, "
              f"{dtype_name!r})", file=sys.stderr)
        return 2
    mod = rung_module(tuning)
    gen = torch.Generator(device="cuda").manual_seed(n + d)
    mk = lambda: (torch.randn(b, h, n, d, generator=gen, device="cuda") + 0.5).to(dtype)
    q, k, v, dout = mk(), mk(), mk(), mk() - 0.5
    for label, cfg in backward_variants(mod, d, tuning):
        rung_forward_backward(mod, q, k, v, dout, causal, d ** -0.5, cfg)
        torch.cuda.synchronize()
        print(f"profile workload: {RUNG} [{label}] B{b} H{h} N{n} D{d} {'causal' if causal else 'full'} {dtype_name}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("check", "bench", "sanitize", "tune", "profile"))
    ap.add_argument("--quick", action="store_true", help="bench: fp16, N in 512/4096/16384 only")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tuning", action="store_true", help="build the tuning candidates too; check/bench each")
    ap.add_argument("--dtypes", default="float16,bfloat16", help="bench: comma-separated dtypes")
    ap.add_argument("--rung", default=RUNG, help="the backward rung to work on (default v7)")
    ap.add_argument("--shape", default="4,16,4096,128", help="profile: B,H,N,D")
    ap.add_argument("--causal", action="store_true", help="profile: causal")
    ap.add_argument("--dtype", default="float16", help="profile: float16 or bfloat16")
    a = ap.parse_args()
    globals()["RUNG"] = a.rung
    if not torch.cuda.is_available():
        print("v7_dev needs a CUDA GPU", file=sys.stderr)
        return 2
    return {"check": lambda: run_check(a.tuning), "bench": lambda: run_bench(a.quick, a.reps, a.tuning, a.dtypes),
            "sanitize": lambda: run_sanitize(a.tuning),
            "tune": lambda: run_tune(a.reps),
            "profile": lambda: run_profile(a.tuning, a.shape, a.causal, a.dtype)}[a.what]()


if __name__ == "__main__":
    sys.exit(main())
