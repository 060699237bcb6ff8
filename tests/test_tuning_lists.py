"""The tuning list of benchmarks/fp32_dev.py names as many configs as each tuned rung's
launch_tuning() has cases (CPU only). Which rungs are tuned is the script's own list; the rung
files are read through the registry. Their correctness on the GPU: tests/test_rungs_gpu.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from lab.ladder.registry import get

ROOT = Path(__file__).resolve().parent.parent


def _load_dev_script():
    spec = importlib.util.spec_from_file_location("fp32_dev", ROOT / "benchmarks" / "fp32_dev.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("vid", sorted(_load_dev_script().TUNE_CONFIGS))
def test_tuning_list_matches_the_kernel_cases(vid):
    """fp32_dev.py times candidates by index; a case added to the .cu but not to the list (or the
    reverse, or a changed tile) would be mislabelled in every table the script prints."""
    dev = _load_dev_script()
    source = get(vid).source.read_text()
    tuning = source[source.index("const char* launch_tuning("):]
    tuning = tuning[:tuning.index("#endif")]
    in_kernel: dict[int, list[str]] = {}
    for index, d, tm, tn, threads, min_ctas, unroll_d, unroll_n, p_chunk, schedule in re.findall(
            r"case (\d+): return launch<V\dConfig<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)(?:, (\d+))?"
            r"(?:, (\d+))?>>", tuning):
        labels = in_kernel.setdefault(int(d), [])
        assert int(index) == len(labels), f"{vid} D={d}: case {index} out of order"
        labels.append(f"TM{tm} TN{tn} T{threads} min{min_ctas} u{unroll_d},{unroll_n}"
                      + (f" p{int(p_chunk)}" if p_chunk and int(p_chunk) else "")
                      + {"": "", "1": "", "2": " s2", "3": " mb"}[schedule])  # v4's K/V schedule
    assert in_kernel == dev.TUNE_CONFIGS[vid]
    assert set(in_kernel) == set(get(vid).head_dims)
