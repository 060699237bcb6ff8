"""The attention problem: shape and dtype, and the forward's FLOPs (a mode's FLOPs and minimum bytes:
lab.measure.rates).

Layout is (B, H, N, D) contiguous for Q, K, V and O. With seqlen_q != seqlen_k the causal mask is
aligned top-left (query i sees keys j <= i), as in PyTorch's `scaled_dot_product_attention`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

from lab.errors import LabError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "f32": "float32", "fp16": "float16",
                 "half": "float16", "f16": "float16", "bf16": "bfloat16", "float32": "float32",
                 "float16": "float16", "bfloat16": "bfloat16"}
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
"""How a table's narrow column names a dtype (bfloat16 is bf16, never "bfp16")."""

DEFAULT_SHAPE = "8,16,1024,64"
_LABEL_RE = re.compile(r"B(\d+)-H(\d+)(?:kv(\d+))?-N(\d+)(?:x(\d+))?-D(\d+)(-causal)?-(float32|float16|bfloat16)"
                       r"(-deterministic)?")
DETERMINISTIC_SUFFIX = "-deterministic"



@dataclass(frozen=True)
class Problem:
    batch: int
    heads: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool = False
    dtype: str = "float32"
    heads_kv: int | None = None   # GQA/MQA: K and V heads (None: = heads); each serves heads/heads_kv queries
    # the backward asked for its deterministic mode (bitwise-identical dQ, dK, dV run to run): an argument
    # of the call, as causal is (FlashAttention-3's `deterministic`); only a rung declaring it runs one
    deterministic: bool = False

    def __post_init__(self):
        if self.heads_kv is None:
            object.__setattr__(self, "heads_kv", self.heads)
        for name in ("batch", "heads", "seqlen_q", "seqlen_k", "head_dim", "heads_kv"):
            if getattr(self, name) <= 0:
                raise LabError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.heads % self.heads_kv:
            raise LabError(f"heads_kv ({self.heads_kv}) must divide heads ({self.heads}): each K/V head "
                           "serves the same number of query heads")
        if self.dtype not in DTYPE_BYTES:
            raise LabError(f"unknown dtype {self.dtype!r}; use float32, float16 or bfloat16")

    @property
    def shape_q(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.seqlen_q, self.head_dim)

    @property
    def shape_kv(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads_kv, self.seqlen_k, self.head_dim)

    @property
    def gqa(self) -> bool:
        return self.heads_kv != self.heads

    @property
    def forward_flops(self) -> float:
        """The FORWARD's FLOPs, 4*B*H*Nq*Nk*D (two matmuls), halved for causal (the usual convention).
        A run's FLOPs depend on its mode: lab.measure.rates.flops(problem, mode)."""
        f = 4.0 * self.batch * self.heads * self.seqlen_q * self.seqlen_k * self.head_dim
        return f / 2 if self.causal else f

    def label(self) -> str:
        """The problem in one word, every field in it: B8-H16kv4-N1024x2048-D64-causal-float16 (a
        deterministic backward asked for: ...-float16-deterministic). It names runs and rows, and it is
        how a problem travels to a child process (`from_label`)."""
        n = f"{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"{self.seqlen_q}x{self.seqlen_k}"
        h = f"{self.heads}" if not self.gqa else f"{self.heads}kv{self.heads_kv}"
        return (f"B{self.batch}-H{h}-N{n}-D{self.head_dim}{'-causal' if self.causal else ''}-{self.dtype}"
                f"{DETERMINISTIC_SUFFIX if self.deterministic else ''}")

    @classmethod
    def from_label(cls, label: str) -> "Problem":
        """The problem a `label()` names (the one encoding of a problem on a child's command line)."""
        m = _LABEL_RE.fullmatch(label.strip())
        if m is None:
            raise LabError(f"bad problem label {label!r}: expected e.g. B8-H16-N1024-D64-float16 "
                           "(B8-H16kv4-N1024x2048-D64-causal-float16 with GQA, Nq != Nk and a mask)")
        b, h, hkv, nq, nk, d, causal, dtype, deterministic = m.groups()
        return cls(int(b), int(h), int(nq), int(nk or nq), int(d), causal is not None, dtype,
                   int(hkv) if hkv else None, deterministic is not None)

    def with_dtype(self, dtype: str) -> "Problem":
        return replace(self, dtype=dtype)

    def plain(self) -> "Problem":
        """The same problem without the deterministic request: what a baseline runs (SDPA's backends
        take no such flag; torch's default backward is what they are timed with)."""
        return replace(self, deterministic=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        if not self.gqa:
            d.pop("heads_kv")   # stored problems without GQA read and round-trip as before
        if not self.deterministic:
            d.pop("deterministic")   # as heads_kv: problems stored before the deterministic mode are unchanged
        d.update(forward_flops=self.forward_flops, label=self.label())
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Problem":
        return cls(d["batch"], d["heads"], d["seqlen_q"], d["seqlen_k"], d["head_dim"],
                   d.get("causal", False), d.get("dtype", "float32"), d.get("heads_kv"),
                   bool(d.get("deterministic", False)))


def label_without_dtype(label: str) -> str:
    """A problem label without its dtype (B4-H16-N2048-D128-causal; a deterministic one keeps its
    -deterministic, so that its runs and rows never group with the default's); a label the lab did
    not write comes back as it is."""
    return re.sub(r"-(?:float32|float16|bfloat16)(?=$|-deterministic$)", "", label, count=1)


def normalize_dtype(name: str) -> str:
    key = name.strip().lower().removeprefix("torch.")
    if key not in DTYPE_ALIASES:
        raise LabError(f"unknown dtype {name!r}; use float32, float16 or bfloat16")
    return DTYPE_ALIASES[key]


def parse_shape(spec: str, causal: bool = False, dtype: str = "float32",
                seqlen_k: int | None = None, deterministic: bool = False) -> Problem:
    """Parse `B,H,N,D` (or `B,H,Nq,Nk,D`; heads `H:Hkv` for GQA/MQA) into a Problem."""
    parts = [p.strip() for p in spec.replace("x", ",").split(",") if p.strip()]
    heads_kv = None
    if len(parts) >= 2 and ":" in parts[1]:   # as a sweep's shape spec writes K/V heads: 32:8
        parts[1], _, kv = parts[1].partition(":")
        try:
            heads_kv = int(kv)
        except ValueError:
            raise LabError(f"bad shape {spec!r}: heads H:Hkv takes integers, e.g. 32:8") from None
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise LabError(f"bad shape {spec!r}: expected integers B,H,N,D such as {DEFAULT_SHAPE}") from None
    if len(nums) == 4:
        b, h, n, d = nums
        nk = n if seqlen_k is None else seqlen_k
    elif len(nums) == 5:
        b, h, n, nk, d = nums
    else:
        raise LabError(f"bad shape {spec!r}: expected B,H,N,D (or B,H,Nq,Nk,D), e.g. {DEFAULT_SHAPE}")
    return Problem(b, h, n, nk, d, causal, normalize_dtype(dtype), heads_kv, deterministic)


def check_supported(variant, problem: Problem) -> None:
    """Refuse (exit 2) a problem the rung cannot run, before anything touches the GPU."""
    if problem.head_dim not in variant.head_dims:
        raise LabError(f"{variant.id} supports head_dim {', '.join(map(str, variant.head_dims))}; "
                       f"got {problem.head_dim}")
    if problem.gqa and not variant.gqa:
        raise LabError(f"{variant.id} does not declare GQA support (heads_kv < heads); got {problem.label()}",
                       hint="a rung that takes K and V with fewer heads declares gqa = true in its lab:rung block")
    if problem.deterministic and not variant.deterministic:
        raise LabError(deterministic_refusal(variant))
    check_dtype(variant, problem.dtype)


def deterministic_refusal(variant) -> str:
    """Why a rung cannot run a deterministic backward (one line)."""
    if not variant.backward:
        return f"{variant.id} has no backward, so no deterministic backward (--deterministic)"
    return (f"{variant.id} has no deterministic backward (--deterministic): its lab:rung block does not declare "
            "deterministic = true (`lab variants`: the det column)")


def require_deterministic_modes(deterministic: bool, modes) -> None:
    """--deterministic asks the backward for bitwise-identical gradients: refuse it (exit 2) where the
    command runs no backward (every mode fwd), before anything is built or launched."""
    modes = [modes] if isinstance(modes, str) else list(modes)
    if deterministic and "fwd" in modes:
        raise LabError("--deterministic is a mode of the backward (bitwise-identical dQ, dK, dV run to run): "
                       f"it needs --mode bwd or fwd+bwd, not {','.join(modes)}")


def check_dtype(variant, dtype: str) -> None:
    """Refuse (exit 2) a dtype the rung does not declare: with a shape or without one (a seeded list)."""
    if dtype not in variant.dtypes:
        raise LabError(f"{variant.id} supports dtype {', '.join(variant.dtypes)}; got {dtype}",
                       hint=f"pass --dtype {variant.default_dtype}")


def make_inputs(problem: Problem, seed: int = 0, device: str = "cuda", layout: str = "BHND"):
    """Seeded Q, K, V of the problem's dtype: standard normal plus 0.5, so the scores are not
    zero-mean (zero-mean data hides some indexing bugs and can time faster than real data).
    With layout "BNHD" the same values come as contiguous (B, N, H, D) tensors."""
    import torch

    dtype = getattr(torch, problem.dtype)
    gen = torch.Generator(device=device).manual_seed(seed)

    def one(shape):
        return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) + 0.5).to(dtype)

    q, k, v = one(problem.shape_q), one(problem.shape_kv), one(problem.shape_kv)
    if layout == "BNHD":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return q, k, v


def softmax_scale(problem: Problem) -> float:
    return problem.head_dim ** -0.5
