"""The timer's L2 flush on the GPU (lab.measure.l2flush): it builds here, and it leaves none of a kernel's lines in
the L2, evict-last ones included, which the plain zeroing did not (measured on an H200: 13% of an evict-last buffer
survived it; v9_notes, "Step 22").

The second test runs benchmarks/l2_flush_probe.py under Nsight Compute with its cache control off (ncu neither
flushes nor invalidates): a 16 MiB buffer read with an evict-last policy, the lab's flush, the buffer read again
(profiled: its DRAM bytes are what the flush evicted), the flush again, then a 24 MiB buffer read twice (the second
read profiled: what the flush itself left occupying the L2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU: the L2 flush runs on one", allow_module_level=True)

from lab.measure.bench import L2_FLUSH_BYTES  # noqa: E402
from lab.measure.l2flush import EVICT_LAST_SWEPT, L2Flush  # noqa: E402

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "l2_flush_probe.py"
BUFFER_MB, CAP_MB = 16 * 2**20 / 1e6, 24 * 2**20 / 1e6


def test_the_flush_kernels_build_and_leave_the_buffer_zero():
    flush = L2Flush(torch, L2_FLUSH_BYTES)
    assert flush.method == EVICT_LAST_SWEPT, flush.describe()
    flush.buffer.fill_(7)
    flush.evict()
    torch.cuda.synchronize()
    assert int(flush.buffer.count_nonzero()) == 0


def test_the_flush_evicts_evict_last_lines_and_leaves_the_l2_free(tmp_path):
    from lab.errors import LabError
    from lab.profilers.ncu import find_ncu, find_ncu_report_module, load_report

    try:
        ncu = find_ncu()
        find_ncu_report_module()
    except LabError as exc:
        pytest.skip(str(exc))
    report = tmp_path / "probe"
    res = subprocess.run([ncu, "--cache-control", "none", "--nvtx", "--nvtx-include", "l2probe/", "--nvtx-include",
                          "l2cap/", "--metrics", "dram__bytes_read.sum", "-f", "-o", str(report), sys.executable,
                          str(PROBE), "--policy", "evict_last", "--flush", "lab"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    frame = load_report(str(report) + ".ncu-rep")
    unit = frame.attrs["units"]["dram__bytes_read.sum"]
    scale = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}.get(unit)
    assert scale is not None, f"dram__bytes_read.sum in {unit!r}"
    reread, cap = (float(v) * scale for v in frame["dram__bytes_read.sum"])
    assert reread >= 0.97 * BUFFER_MB, f"after the flush only {reread:.2f} of {BUFFER_MB:.2f} MB came from DRAM"
    assert cap <= 0.10 * CAP_MB, f"a buffer that fits the L2 read {cap:.2f} MB from DRAM on its second read"
