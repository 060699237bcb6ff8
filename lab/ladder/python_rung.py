"""A `python` rung: any callable `function(q, k, v, causal, softmax_scale) -> o` (a Triton kernel,
CuTe DSL, torch.compile, a wrapper around flash-attn), checked, timed and profiled like a .cu rung.

Its file opens with the same lab:rung block as a .cu rung; `entry` names the callable, either a
function of that file ("forward", the default) or "package.module:function". Nothing is built.
The callable receives Q, K, V in the rung's declared layout, contiguous: (B, H, N, D) or, with
layout = "BNHD", (B, N, H, D) as flash-attn's API takes them, and returns O in that same layout.
With `gqa = true` K and V may have fewer heads than Q (heads_kv divides heads).

The backward (optional; the block says `backward = true`), the python side of kernels/common.cuh's
backward contract:
  * the forward returns (o, lse): lse is the row log-sum-exp of the scaled scores, natural log,
    fp32, [B, H, Nq] (whatever the layout), as torch's flash backend returns it;
  * the entry's module has `backward(q, k, v, o, dout, lse, causal, softmax_scale) -> (dq, dk, dv)`:
    Q, K, V, O and dO in the rung's layout, the forward's lse; gradients returned in that layout,
    dK and dV with K's and V's heads. Scratch (a dQ accumulator, the row statistic D = rowsum(dO * O))
    is the function's own: it allocates what it needs from torch, so peak memory counts it.
The lab calls the backward directly, never through autograd (lab.measure.call says why).
A forward-only rung that declares `writes_lse = true` returns (o, lse) too, with no `backward`.
A rung that declares `deterministic = true` (the deterministic contract of kernels/common.cuh) has
`backward(..., causal, softmax_scale, deterministic=False)`: the lab passes deterministic=True when
asked (`--deterministic`), and the function then returns bitwise-identical gradients run to run.
The keyword is passed to no other rung's backward.

`PythonRung.forward(q, k, v, o, causal, scale, lse=None)` and `PythonRung.backward(q, k, v, o, dout,
lse, dq, dk, dv, causal, scale, deterministic=False)` are the extension's interface (tensors in (B, H, N, D), outputs
written into the given buffers), so the correctness gate runs a python rung unchanged; an output of
the wrong shape or dtype raises RuntimeError there, which the gate records as a failed shape (exit 1),
not a crash.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from lab.errors import LabError

_loaded: dict[tuple, object] = {}


def _entry_module(variant) -> tuple[object, str, str]:
    """(the module the rung's entry lives in, where it is as the user names it, the function's name);
    an import that fails is bad input (exit 2) with its cause."""
    entry = variant.entry or "forward"
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
        return module, module_name, func_name
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
    return module, str(variant.source), entry


def load_functions(variant) -> tuple:
    """(forward, backward or None): the rung's callables, imported once per version of its file."""
    key = (str(variant.source), variant.source.stat().st_mtime_ns, variant.entry, variant.backward)
    if key in _loaded:
        return _loaded[key]
    module, where, func_name = _entry_module(variant)
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise LabError(f"{variant.id}: {where} has no function {func_name!r}",
                       hint="set entry in the lab:rung block to the callable: \"function\" or \"module:function\"")
    backward = None
    if variant.backward:
        backward = getattr(module, "backward", None)
        if not callable(backward):
            raise LabError(f"{variant.id} declares backward = true but {where} has no function 'backward'",
                           hint="define backward(q, k, v, o, dout, lse, causal, softmax_scale) -> (dq, dk, dv) "
                                "beside the forward (lab/ladder/python_rung.py), or drop backward = true")
        if variant.deterministic and not _takes_keyword(backward, "deterministic"):
            raise LabError(f"{variant.id} declares deterministic = true but {where}'s backward takes no "
                           "`deterministic` keyword",
                           hint="define backward(q, k, v, o, dout, lse, causal, softmax_scale, deterministic=False) "
                                "(lab/ladder/python_rung.py), or drop deterministic = true")
    _loaded[key] = (fn, backward)
    return _loaded[key]


def _takes_keyword(fn, name: str) -> bool:
    """Whether `fn` accepts the keyword `name` (by name or through **kwargs); True where its signature
    cannot be read (a builtin, a C extension's function): the call itself is the judge then."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind == p.VAR_KEYWORD or (p.name == name and p.kind != p.POSITIONAL_ONLY) for p in params)


def to_layout(t, layout: str):
    """(B, H, N, D) -> the rung's layout, contiguous."""
    return t if layout == "BHND" else t.transpose(1, 2).contiguous()


def from_layout(t, layout: str):
    return t if layout == "BHND" else t.transpose(1, 2)


class PythonRung:
    """The extension's interface around a python rung's callables."""

    def __init__(self, variant, fn, backward_fn=None):
        self.variant = variant
        self.fn = fn
        self.backward_fn = backward_fn
        self.__name__ = f"python rung {variant.id}"

    # ------------------------------------------------------------------ in the rung's own layout (timing)

    def call_forward(self, q, k, v, causal: bool, softmax_scale: float):
        """One forward on inputs already in the rung's layout: (o, lse), lse None where the rung
        writes none (neither backward = true nor writes_lse = true)."""
        out = self.fn(q, k, v, causal, softmax_scale)
        if not self.variant.writes_lse:
            return out, None
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            declared = "backward = true" if self.variant.backward else "writes_lse = true"
            raise RuntimeError(f"{self.variant.id} declares {declared}, so its forward returns (o, lse); "
                               f"it returned {type(out).__name__}")
        return out[0], out[1]

    def call_backward(self, q, k, v, o, dout, lse, causal: bool, softmax_scale: float, deterministic: bool = False):
        """One backward in the rung's layout: (dq, dk, dv). `deterministic` reaches only a rung that
        declares it (deterministic = true), whose function takes the keyword."""
        if self.backward_fn is None:
            raise RuntimeError(f"{self.variant.id} has no backward")
        if deterministic and not self.variant.deterministic:
            raise RuntimeError(f"{self.variant.id}'s backward has no deterministic mode: its lab:rung block does not "
                               "declare deterministic = true")
        if self.variant.deterministic:
            return self.backward_fn(q, k, v, o, dout, lse, causal, softmax_scale, deterministic=deterministic)
        return self.backward_fn(q, k, v, o, dout, lse, causal, softmax_scale)

    # ------------------------------------------------------------------ the extension's interface (B, H, N, D)

    def forward(self, q, k, v, o, causal: bool, softmax_scale: float, lse=None) -> None:
        layout = self.variant.layout
        qn = to_layout(q, layout)
        out, row_lse = self._guarded(self.call_forward, qn, to_layout(k, layout), to_layout(v, layout), causal,
                                     softmax_scale)
        self.validate(out, qn.shape, q.dtype, q.device)
        o.copy_(from_layout(out, layout))
        if lse is not None:
            if row_lse is None:
                raise RuntimeError(f"{self.variant.id}'s forward returns no lse: its lab:rung block declares "
                                   "neither backward = true nor writes_lse = true")
            self.validate(row_lse, lse.shape, lse.dtype, lse.device, what="lse")
            lse.copy_(row_lse)

    def backward(self, q, k, v, o, dout, lse, dq, dk, dv, causal: bool, softmax_scale: float,
                 deterministic: bool = False) -> None:
        layout = self.variant.layout
        native = [to_layout(t, layout) for t in (q, k, v, o, dout)]
        grads = self._guarded(self.call_backward, *native, lse, causal, softmax_scale, deterministic)
        if not isinstance(grads, (tuple, list)) or len(grads) != 3:
            raise RuntimeError(f"{self.variant.id}'s backward returned {type(grads).__name__}; expected (dq, dk, dv)")
        for name, got, buf, like in zip(("dq", "dk", "dv"), grads, (dq, dk, dv), native[:3]):
            self.validate(got, like.shape, buf.dtype, buf.device, what=name)
            buf.copy_(from_layout(got, layout))

    def _guarded(self, fn, *args):
        try:
            return fn(*args)
        except RuntimeError:
            raise
        except Exception as e:  # whatever the user's code raises fails this shape, as a launcher's refusal does
            raise RuntimeError(f"{self.variant.id} raised {type(e).__name__}: {e}") from e

    def validate(self, out, shape, dtype, device, what: str = "o") -> None:
        import torch

        vid = self.variant.id
        named = "" if what == "o" else f"{what} "   # the output is the forward's one tensor; others are named
        if not isinstance(out, torch.Tensor):
            raise RuntimeError(f"{vid} returned {named}{type(out).__name__}, not a tensor")
        if tuple(out.shape) != tuple(shape):
            raise RuntimeError(f"{vid} returned {named}shape {tuple(out.shape)}; expected {tuple(shape)}"
                               + ("" if what == "lse" else f" ({self.variant.layout})"))
        if out.dtype != dtype:
            raise RuntimeError(f"{vid} returned {named}{str(out.dtype).removeprefix('torch.')}; expected "
                               f"{str(dtype).removeprefix('torch.')}"
                               + (" (fp32 row log-sum-exp)" if what == "lse" else ", the inputs' dtype"))
        if out.device != device:
            raise RuntimeError(f"{vid} returned {named}a tensor on {out.device}; expected {device}")


def load(variant) -> PythonRung:
    return PythonRung(variant, *load_functions(variant))


def source_key(variant) -> str:
    return hashlib.sha256(Path(variant.source).read_bytes()).hexdigest()
