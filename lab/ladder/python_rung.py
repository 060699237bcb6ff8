"""A `python` rung: any callable `function(q, k, v, causal, softmax_scale) -> o` (a Triton kernel,
CuTe DSL, torch.compile, a wrapper around flash-attn), checked, timed and profiled like a .cu rung.

Its file opens with the same lab:rung block as a .cu rung; `entry` names the callable, either a
function of that file ("forward", the default) or "package.module:function". Nothing is built.
The callable receives Q, K, V in the rung's declared layout, contiguous: (B, H, N, D) or, with
layout = "BNHD", (B, N, H, D) as flash-attn's API takes them, and returns O in that same layout.

`PythonRung.forward(q, k, v, o, causal, scale)` is the extension's interface (inputs and output in
(B, H, N, D)), so the correctness gate runs a python rung unchanged; an output of the wrong shape
or dtype raises RuntimeError there, which the gate records as a failed shape (exit 1), not a crash.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from lab.errors import LabError

_loaded: dict[tuple, object] = {}


def load_callable(variant):
    """Import the rung's callable; an import that fails is bad input (exit 2) with its cause."""
    entry = variant.entry or "forward"
    key = (str(variant.source), variant.source.stat().st_mtime_ns, entry)
    if key in _loaded:
        return _loaded[key]
    if ":" in entry:
        module_name, func_name = entry.split(":", 1)
        # the rung's folder first, so a module beside the rung file imports as the user expects
        folder = str(variant.source.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # ImportError, or whatever the module raises at import time
            raise LabError(f"{variant.id}: cannot import module {module_name!r} named by entry in "
                           f"{variant.source}: {type(e).__name__}: {e}") from None
        where = module_name
    else:
        func_name = entry
        name = f"lab_rung_{variant.id}_{hashlib.sha1(str(variant.source).encode()).hexdigest()[:8]}"
        spec = importlib.util.spec_from_file_location(name, variant.source)
        if spec is None or spec.loader is None:
            raise LabError(f"{variant.id}: cannot import {variant.source}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton's @jit and dataclasses look their module up by name
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(name, None)
            raise LabError(f"{variant.id}: importing {variant.source} failed: {type(e).__name__}: {e}") from None
        where = str(variant.source)
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise LabError(f"{variant.id}: {where} has no function {func_name!r}",
                       hint="set entry in the lab:rung block to the callable: \"function\" or \"module:function\"")
    _loaded[key] = fn
    return fn


def to_layout(t, layout: str):
    """(B, H, N, D) -> the rung's layout, contiguous."""
    return t if layout == "BHND" else t.transpose(1, 2).contiguous()


def from_layout(t, layout: str):
    return t if layout == "BHND" else t.transpose(1, 2)


class PythonRung:
    """The extension's interface around a python rung's callable."""

    def __init__(self, variant, fn):
        self.variant = variant
        self.fn = fn
        self.__name__ = f"python rung {variant.id}"

    def call(self, q, k, v, causal: bool, softmax_scale: float):
        """One launch on inputs already in the rung's layout; returns what the callable returns."""
        return self.fn(q, k, v, causal, softmax_scale)

    def forward(self, q, k, v, o, causal: bool, softmax_scale: float) -> None:
        layout = self.variant.layout
        try:
            out = self.call(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), causal, softmax_scale)
        except RuntimeError:
            raise
        except Exception as e:  # whatever the user's code raises fails this shape, as a launcher's refusal does
            raise RuntimeError(f"{self.variant.id} raised {type(e).__name__}: {e}") from e
        self.validate(out, to_layout(q, layout).shape, q.dtype, q.device)
        o.copy_(from_layout(out, layout))

    def validate(self, out, shape, dtype, device) -> None:
        import torch

        vid = self.variant.id
        if not isinstance(out, torch.Tensor):
            raise RuntimeError(f"{vid} returned {type(out).__name__}, not a tensor")
        if tuple(out.shape) != tuple(shape):
            raise RuntimeError(f"{vid} returned shape {tuple(out.shape)}; expected {tuple(shape)} "
                               f"({self.variant.layout})")
        if out.dtype != dtype:
            raise RuntimeError(f"{vid} returned {str(out.dtype).removeprefix('torch.')}; expected "
                               f"{str(dtype).removeprefix('torch.')}, the inputs' dtype")
        if out.device != device:
            raise RuntimeError(f"{vid} returned a tensor on {out.device}; expected {device}")


def load(variant) -> PythonRung:
    return PythonRung(variant, load_callable(variant))


def source_key(variant) -> str:
    return hashlib.sha256(Path(variant.source).read_bytes()).hexdigest()
