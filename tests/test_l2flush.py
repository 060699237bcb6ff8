"""The timer's L2 flush without a GPU (lab.measure.l2flush): what it launches, in what order, and what it says when
NVRTC cannot build its kernels. Whether it evicts evict-last lines is measured on the GPU
(tests/test_l2flush_gpu.py)."""

from __future__ import annotations

import types

import pytest

from lab.measure import l2flush


class FakeBuffer:
    def __init__(self, log):
        self.log = log

    def zero_(self):
        self.log.append(("zero",))


def fake_torch(log, compile_kernel):
    cuda = types.SimpleNamespace(current_device=lambda: 0)
    if compile_kernel is not None:
        cuda._compile_kernel = compile_kernel
    return types.SimpleNamespace(__version__="fake", cuda=cuda, int32="int32",
                                 empty=lambda n, dtype, device: FakeBuffer(log))


@pytest.fixture(autouse=True)
def fresh_build_cache(monkeypatch):
    monkeypatch.setattr(l2flush, "_built", {})


def test_the_sweep_then_the_discard_then_the_zeroing():
    log = []

    def compile_kernel(source, name):
        assert f'extern "C" __global__ void {name}(' in source
        return lambda grid, block, args: log.append((name, args[1]))

    flush = l2flush.L2Flush(fake_torch(log, compile_kernel), 256 << 20)
    flush.evict()
    assert flush.method == l2flush.EVICT_LAST_SWEPT
    assert log == [("lab_l2_write_evict_last", (256 << 20) // 16), ("lab_l2_discard", (256 << 20) // 128), ("zero",)]
    assert "evict-last" in flush.describe()


@pytest.mark.parametrize("compile_kernel", [None, "raises"])
def test_without_nvrtc_the_zeroing_alone_and_it_says_so(compile_kernel, capsys):
    log = []

    def raises(source, name):
        raise RuntimeError("libnvrtc.so: cannot open shared object file")

    flush = l2flush.L2Flush(fake_torch(log, raises if compile_kernel else None), 256 << 20)
    flush.evict()
    assert flush.method == l2flush.ZEROED and log == [("zero",)]
    assert "may survive" in flush.describe()
    assert ("libnvrtc" if compile_kernel else "_compile_kernel") in flush.describe()
    assert "the L2 flush is the zeroing alone" in capsys.readouterr().err


def test_a_buffer_of_partial_lines_is_refused():
    with pytest.raises(ValueError):
        l2flush.L2Flush(fake_torch([], None), (256 << 20) + 16)
