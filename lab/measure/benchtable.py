"""`lab bench`: each rung checked, then timed beside the SDPA backends, as one side-by-side table.

Correctness gates timing: a rung that fails its check on the benched shape is reported as failed
and not timed. Baselines are timed once per problem shape and dtype (lab.measure.baselines.baseline_dtypes:
the rung's own 16-bit dtype, fp16 for an fp32 rung, and fp32), in the same process and run as the rungs,
so the ratios are side by side; a column names the dtype its baselines ran in.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from lab.console import rich_console, say
from lab.errors import LabError
from lab.environment import device_info, git_info, require_compute_capability, require_gpu, software_info
from lab.measure import rates
from lab.measure.baselines import baseline_dtypes, kernel_split_of, run_baselines, under_load_reading
from lab.measure.bench import DEFAULT_REPS, DEFAULT_WARMUP
from lab.measure.call import require_mode
from lab.measure.checked import rung_measurement
from lab.measure.kernelsplit import EXCLUDES
from lab.measure.gate import gated
from lab.measure.problem import DTYPE_SHORT, Problem, check_supported, label_without_dtype
from lab.measure.timed import TimingRefused


def bench_ladder(chosen, problems, reps: int = DEFAULT_REPS, warmup: int = DEFAULT_WARMUP, baselines: bool = True,
                 backends=None, mode: str = "fwd", kernel_calls: int = 0, under_load_ms: float = 0.0) -> dict:
    """Each rung built, gated in a child and timed in `mode` (lab.measure.gate), beside the SDPA
    backends timed in the same mode once per shape. `kernel_calls`: each timed rung and baseline then
    traced for its kernel split (lab.measure.kernelsplit), on the calls it was timed with; a rung that
    failed its check, or was given no time, has none. `under_load_ms`: every rung's and baseline's
    repetitions each behind that long a stretch of its own calls (lab.measure.timed, UNDER LOAD)."""
    for variant, problem in zip(chosen, problems):   # every refusal (exit 2) before any GPU work
        check_supported(variant, problem)
        require_mode(variant, mode)
    require_gpu("bench")  # a clear refusal before any work
    for variant in chosen:
        require_compute_capability(variant)
    if kernel_calls:
        require_kernel_trace()
    rows, base, failed, refusals = [], {}, [], []   # base: (shape, dtype) -> that dtype's baselines
    for variant, problem in zip(chosen, problems):
        shape_key = _shape_key(problem.to_dict())
        wanted = baseline_dtypes(problem.dtype)
        missing = [d for d in wanted if (shape_key, d) not in base] if baselines else []
        if missing:
            say(f"baselines for {problem.with_dtype(missing[0]).label()}"
                + "".join(f", {d}" for d in missing[1:]) + ("" if mode == "fwd" else f" ({mode})"))
            timed = run_baselines(problem, reps, warmup, mode=mode, dtypes=missing, kernel_calls=kernel_calls,
                                  under_load_ms=under_load_ms, **({"backends": backends} if backends else {}))
            for d in missing:
                base[(shape_key, d)] = [b for b in timed if b.dtype == d]
        # correctness gates timing: built, then checked in a child on the benched shape and a few
        # ragged ones, causal and not, so that a crashing rung cannot take the table down with it
        rung = gated(variant, problem, mode)
        row = {"variant": variant.id, "title": variant.title, "problem": problem.to_dict(), "mode": mode,
               "correct": rung.passed, "correctness": rung.verdict}
        if not rung.passed:
            failed.append(variant.id)
            rows.append(row)
            continue
        say(f"bench {variant.id} {problem.label()}" + ("" if mode == "fwd" else f" {mode}"))
        measurement = rung_measurement(variant, rung.module, problem, mode=mode)
        try:
            timing = measurement.time(reps=reps, warmup=warmup, under_load_ms=under_load_ms)
        except TimingRefused as refused:   # measured, but not a time the lab will print
            row["refused"] = refused.to_dict()
            refusals.append(str(refused))
            rows.append(row)
            continue
        row.update(timing=timing.to_dict(), tflops=rates.tflops(rates.flops(problem, mode), timing.median),
                   peak_memory_bytes=timing.peak_memory_bytes,
                   baselines=[b.to_dict(timing.median) for d in wanted for b in base.get((shape_key, d), [])])
        if under_load_ms:
            row["under_load"] = under_load_reading(timing)
        if kernel_calls:   # after the timing, on its measurement: the calls the table's time is of
            say(f"kernel split {variant.id} {problem.label()}: {kernel_calls} calls under torch.profiler")
            row["kernel_split"] = kernel_split_of(measurement, kernel_calls)
        rows.append(row)
        del measurement
    for prev, row in zip(rows, rows[1:]):
        # the same problem up to dtype (the ladder's fp32 -> fp16 step is a gain we want to show)
        if "timing" in prev and "timing" in row and _shape_key(prev["problem"]) == _shape_key(row["problem"]):
            row["speedup_vs_previous"] = rates.ratio(prev["timing"]["median"], row["timing"]["median"])
    out = {"device": device_info(), "software": software_info(), "git": git_info(), "reps": reps,
           "warmup": warmup, "mode": mode, "rows": rows}
    # the caller prints and stores the table first, then exits 1 on these (lab.cli bench)
    out["failures"] = ([f"wrong results from {', '.join(failed)}: not timed"] if failed else []) + refusals
    if under_load_ms:
        out["under_load_ms"] = under_load_ms
    if kernel_calls:
        out["kernel_calls"] = kernel_calls
        out["failures"] += [f"no kernel split for {who} on {label}: {split['error']}"
                            for who, label, split in kernel_splits(rows) if "error" in split]
    return out


def require_kernel_trace() -> None:
    """Refuse --kernels (exit 2) before any work where torch.profiler cannot record CUDA kernels."""
    from torch.profiler import ProfilerActivity, supported_activities

    if ProfilerActivity.CUDA not in supported_activities():
        raise LabError("--kernels needs torch.profiler's CUDA activity (Kineto with CUPTI), which this build of "
                       "torch does not have", hint="a CUDA build of torch from pytorch.org has it; or drop --kernels")


def implementations_with(rows: list[dict], field: str) -> list[tuple[str, str, float | None, object]]:
    """(who, problem label, median ms, the entry's `field`) for each rung and baseline of `rows` that has
    `field`, in table order, each baseline once per shape and dtype: a rung by its id, a baseline as
    `sdpa-<backend>` on its own problem (its dtype, SDPA's default backward)."""
    out, seen = [], set()
    for row in rows:
        if field in row:
            out.append((row["variant"], row["problem"]["label"], (row.get("timing") or {}).get("median"), row[field]))
        for b in row.get("baselines", []):
            key = (_shape_key(row["problem"]), b["backend"], b["dtype"])
            if field in b and key not in seen:
                seen.add(key)
                label = Problem.from_dict(row["problem"]).plain().with_dtype(b["dtype"]).label()
                out.append((f"sdpa-{b['backend']}", label, b.get("median_ms"), b[field]))
    return out


def under_load_rows(rows: list[dict]) -> list[tuple[str, str, float | None, dict]]:
    """(who, problem label, median ms, under_load reading) of each rung and baseline timed under load."""
    return implementations_with(rows, "under_load")


def print_under_load(result: dict, console) -> None:
    """Under load: the clock each implementation's stretches held the GPU at, as NVML read it while each one's
    last calls ran, just before the timed call."""
    found = under_load_rows(result["rows"]) if result.get("under_load_ms") else []
    if not found:
        return
    t = Table(title=f"under load: each repetition behind {result['under_load_ms']:g} ms of its own calls back to "
                    "back; NVML read while each stretch's last calls ran")
    for col in ("implementation", "problem", "median ms", "calls a stretch", "SM MHz (median)", "power-capped"):
        t.add_column(col, justify="left" if col in ("implementation", "problem") else "right")
    for who, label, median, r in found:
        share = r.get("load_power_capped_share")
        t.add_row(who, label, f"{median:.4g}" if median is not None else "", str(r.get("under_load_calls") or ""),
                  f"{r['load_sm_clock_mhz']:g}" if r.get("load_sm_clock_mhz") is not None else "n/a (no NVML)",
                  f"{share:.0%} of {r['load_states_read']}" if share is not None else "n/a (no NVML)")
    console.print(t)
    console.print("power-capped: the share of stretches at whose end NVML said the power limit held the clock "
                  "down (sw_power_cap, hw_power_brake_slowdown). Where it is 0%, the stretch did not reach the limit: "
                  "lengthen --under-load.")


def kernel_splits(rows: list[dict]) -> list[tuple[str, str, dict]]:
    """(who, problem label, split) for each rung and baseline of `rows` with a kernel split (or its
    error), as implementations_with orders and names them."""
    return [(who, label, split) for who, label, _, split in implementations_with(rows, "kernel_split")]


def _shape_key(problem: dict) -> tuple:
    return tuple(problem.get(k) for k in ("batch", "heads", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal"))


def _column(baseline: dict) -> str:
    """A baseline's column: its backend and the dtype it was timed in (bf16, not "bfp16")."""
    return f"{baseline['backend']} {DTYPE_SHORT.get(baseline['dtype'], baseline['dtype'])}"


def print_ladder(result: dict) -> None:
    console = rich_console()
    dev = result["device"]
    console.print(f"{dev['name']} (cc {dev['compute_capability']}, {dev['sm_count']} SMs), "
                  f"commit {(result['git']['commit'] or '?')[:10]}{' (dirty)' if result['git']['dirty'] else ''}, "
                  f"{result.get('mode', 'fwd')}, median of {result['reps']} reps, L2 flushed"
                  + (f", each behind {result['under_load_ms']:g} ms of its own calls back to back (under load)"
                     if result.get("under_load_ms") else ""))
    t = Table()
    for col in ("rung", "problem", "ok", "median ms", "± std", "TFLOP/s", "vs prev"):
        t.add_column(col, justify="right" if col not in ("rung", "problem") else "left")
    backends = []
    for row in result["rows"]:
        for b in row.get("baselines", []):
            key = _column(b)
            if key not in backends:
                backends.append(key)
    for key in backends:
        t.add_column(f"x {key}", justify="right")
    for row in result["rows"]:
        cells = [row["variant"], row["problem"]["label"],
                 f"[red]{row['refused']['status']}[/]" if "refused" in row else "yes" if row["correct"] else "NO"]
        if "timing" not in row:
            t.add_row(*cells, *[""] * (4 + len(backends)))
            continue
        tm = row["timing"]
        cells += [f"{tm['median']:.3f}", f"{tm['std']:.3f}", f"{row['tflops']:.2f}",
                  f"{row['speedup_vs_previous']:.2f}x" if "speedup_vs_previous" in row else ""]
        by_key = {_column(b): b for b in row["baselines"]}
        for key in backends:
            b = by_key.get(key)
            cells.append("" if b is None else (f"{b['ratio']:.3f}" if b["status"] == "ok" else "n/a"))
        t.add_row(*cells)
    console.print(t)
    console.print("x backend: the backend's median time / ours (> 1: ours is faster). n/a: the backend cannot "
                  "run this shape or dtype (reason in --json).")
    for row in result["rows"]:
        if "refused" in row:
            console.print(f"{row['variant']}: no time ({row['refused']['status']}): {row['refused']['reason']}",
                          markup=False, highlight=False)
    print_under_load(result, console)
    print_kernel_splits(result, console)


def _split_groups(result: dict) -> list[tuple[str, list[tuple[str, str, dict]]]]:
    """The kernel splits by shape (the problem without its dtype), in table order: (shape, entries)."""
    groups: dict[str, list] = {}
    for who, label, split in kernel_splits(result["rows"]):
        groups.setdefault(label_without_dtype(label), []).append((who, label, split))
    return list(groups.items())


def _who(who: str, label: str) -> str:
    dtype = Problem.from_label(label).dtype
    return f"{who} {DTYPE_SHORT.get(dtype, dtype)}"


def _launches(n: float) -> str:
    return f"{n:.0f}" if abs(n - round(n)) < 1e-9 else f"{n:.2f}"


def _sum_text(split: dict) -> str:
    streams = f", {split['streams']} streams" if split["streams"] > 1 else ""
    return (f"sum (per call {split['sum_us_min']:.1f}-{split['sum_us_max']:.1f}; span {split['span_us']:.1f} us"
            f"{streams})")


def print_kernel_splits(result: dict, console=None) -> None:
    """`lab bench --kernels`: per shape, each rung's and baseline's kernels with their device time per
    call, share and sum (lab.measure.kernelsplit), and what the sum leaves out."""
    groups = _split_groups(result)
    if not groups:
        return
    console = console or rich_console()
    mode = result.get("mode", "fwd")
    for shape, entries in groups:
        t = Table(title=f"kernel split, {mode}, {shape}: device time per call, mean of {result['kernel_calls']} "
                        "traced calls", title_justify="left")
        t.add_column("", no_wrap=True)
        t.add_column("kernel", overflow="fold")   # the one column that folds: names are long, numbers are not
        for col in ("launches", "us/call", "share"):
            t.add_column(col, justify="right", no_wrap=True)
        for who, label, split in entries:
            name = _who(who, label)
            if "error" in split:
                t.add_row(name, Text(f"no split: {split['error']}", style="red"), "", "", "")
                t.add_section()
                continue
            for i, k in enumerate(split["kernels"]):
                t.add_row(name if i == 0 else "", k["short_name"], _launches(k["launches_per_call"]),
                          f"{k['us_per_call']:.1f}", f"{k['share_pct']:.1f}%")
            t.add_row(name if not split["kernels"] else "", Text(_sum_text(split), style="bold"),
                      _launches(sum(k["launches_per_call"] for k in split["kernels"])),
                      Text(f"{split['sum_us']:.1f}", style="bold"), "100%" if split["kernels"] else "")
            t.add_section()
        console.print(t)
    console.print(f"us/call: {EXCLUDES}. span: a call's first start to its last end (the sum plus the gaps "
                  "between kernels, less any overlap). Traced after the timing, on the timed calls' inputs and "
                  "stream, each started as a timed repetition is (L2 flushed, GPU idle).", markup=False, highlight=False)


def markdown_ladder(result: dict, title: str | None = None) -> str:
    """The side-by-side table as Markdown, headed by device, date and commit (for RESULTS.md)."""
    from datetime import datetime, timezone

    dev, git = result["device"], result["git"]
    commit = (git["commit"] or "?")[:10] + {True: " (with uncommitted changes)", None: " (tree copied without .git)",
                                             False: ""}[git["dirty"]]
    lines = [f"### {title or 'lab bench'}", "",
             f"{dev['name']} (cc {dev['compute_capability']}, {dev['sm_count']} SMs, SM clock "
             f"{dev.get('sm_clock_mhz') or '?'} MHz), driver {dev.get('driver') or '?'}, torch "
             f"{result['software'].get('torch')}, {datetime.now(timezone.utc):%Y-%m-%d}, commit {commit}. "
             f"Mode {result.get('mode', 'fwd')}. Median of {result['reps']} repetitions after {result['warmup']} warm-up, L2 flushed before each; "
             "every rung passed its float64 check on this shape first, and the timer's checks (lab.measure.timed: "
             "no work outside the stream, every timed output right with inputs rotating, no time under the "
             "device's floor)."
             + (f" Under load: each repetition behind {result['under_load_ms']:g} ms of its own calls back to back "
                "(lab.measure.timed, UNDER LOAD)." if result.get("under_load_ms") else ""), ""]
    backends = []
    for row in result["rows"]:
        for b in row.get("baselines", []):
            if (b["backend"], b["dtype"]) not in backends:
                backends.append((b["backend"], b["dtype"]))
    head = ["rung", "problem", "median ms (± std)", "TFLOP/s", "vs previous"]
    head += [f"SDPA {b} {DTYPE_SHORT.get(d, d)}: ms (speed-up)" for b, d in backends]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in result["rows"]:
        if "refused" in row:
            lines.append(f"| {row['variant']} | {row['problem']['label']} | no time: {row['refused']['status']} |"
                         + " |" * (len(head) - 3))
            continue
        if "timing" not in row:
            lines.append(f"| {row['variant']} | {row['problem']['label']} | FAILED its check |" + " |" * (len(head) - 3))
            continue
        tm = row["timing"]
        by = {(b["backend"], b["dtype"]): b for b in row["baselines"]}
        cells = [row["variant"], row["problem"]["label"], f"{tm['median']:.4g} (± {tm['std']:.2g})",
                 f"{row['tflops']:.3g}", f"{row['speedup_vs_previous']:.2f}x" if "speedup_vs_previous" in row else ""]
        cells += [f"{by[k]['median_ms']:.4g} ({by[k]['ratio']:.3g}x)" if k in by and by[k]["status"] == "ok" else "n/a"
                  for k in backends]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "speed-up = the backend's median time / the rung's (above 1: the rung is faster); "
              "n/a = the backend cannot run this shape or dtype.", ""]
    loaded = under_load_rows(result["rows"]) if result.get("under_load_ms") else []
    if loaded:
        lines += ["Under load, what NVML read while each stretch's last calls ran, just before the timed call:", "",
                  "| implementation | problem | median ms | SM MHz (median) | power-capped repetitions |",
                  "| --- | --- | --- | --- | --- |"]
        for who, label, median, r in loaded:
            share = r.get("load_power_capped_share")
            lines.append(f"| {who} | {label} | {median:.4g} | {r.get('load_sm_clock_mhz') or 'n/a'} | "
                         + (f"{share:.0%} of {r['load_states_read']} |" if share is not None else "n/a (no NVML) |"))
        lines.append("")
    for shape, entries in _split_groups(result):
        lines += [f"Kernel split, {result.get('mode', 'fwd')}, {shape}: device time per call, mean of "
                  f"{result['kernel_calls']} calls traced by torch.profiler (CUPTI) after the timing.", "",
                  "| implementation | kernel | launches per call | us per call | share |",
                  "| --- | --- | --- | --- | --- |"]
        for who, label, split in entries:
            name = _who(who, label)
            if "error" in split:
                lines.append(f"| {name} | no split: {_cell(split['error'])} | | | |")
                continue
            for k in split["kernels"]:
                lines.append(f"| {name} | `{_cell(k['short_name'])}` | {_launches(k['launches_per_call'])} | "
                             f"{k['us_per_call']:.1f} | {k['share_pct']:.1f}% |")
            launches = _launches(sum(k["launches_per_call"] for k in split["kernels"]))
            lines.append(f"| {name} | **{_sum_text(split)}** | {launches} | **{split['sum_us']:.1f}** | |")
        lines += ["", f"us per call: {EXCLUDES}.", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
