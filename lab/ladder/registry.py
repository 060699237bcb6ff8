"""THE registry of kernel rungs. The CLI, tests, build, reports and README all read this list.

Each rung lives in `kernels/<id>_<slug>.cu` and exports one C launcher named
`lab_forward_<id>` with the signature in `kernels/common.cuh`. Adding a rung is one entry here
plus its file; nothing else lists rungs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"


@dataclass(frozen=True)
class Variant:
    id: str                      # "v1"
    slug: str                    # "naive"
    title: str                   # one line for tables
    dtypes: tuple[str, ...]      # torch dtype names the rung accepts: "float32", "float16", "bfloat16"
    head_dims: tuple[int, ...]   # supported D
    min_cc: tuple[int, int]      # minimum compute capability
    changed: str                 # what changed since the previous rung
    attacks: str                 # the bottleneck it attacks (with the previous rung's evidence)
    predicted_gain: str          # written before it was measured
    arch_flags: tuple[str, ...] = ()  # extra nvcc -gencode flags beyond the defaults (e.g. sm_90a)

    @property
    def source(self) -> Path:
        return KERNELS_DIR / f"{self.id}_{self.slug}.cu"

    @property
    def launcher(self) -> str:
        return f"lab_forward_{self.id}"

    @property
    def default_dtype(self) -> str:
        return self.dtypes[0]

    def label(self) -> str:
        return f"{self.id}_{self.slug}"


VARIANTS: tuple[Variant, ...] = (
    Variant(
        id="v1",
        slug="naive",
        title="Naive: fp32, one thread per query row, grid B x H",
        dtypes=("float32",),
        head_dims=(32, 64, 128),
        min_cc=(7, 5),
        changed="Starting point (flash-attention-minimal design): K/V tiles staged in shared memory, "
        "online softmax with a running max and sum, one thread per query row, one CTA per (batch, head).",
        attacks="None yet: the baseline every later rung is measured against.",
        predicted_gain="Baseline; expected thousands of times slower than SDPA (grid of B*H CTAs, scalar loads).",
    ),
    Variant(
        id="v2",
        slug="float4",
        title="float4: 16-byte vectorized global loads and stores",
        dtypes=("float32",),
        head_dims=(32, 64, 128),
        min_cc=(7, 5),
        changed="Global loads of Q, K, V and stores of O are 16-byte float4 accesses; the tile loads are "
        "spread over the CTA's threads so that consecutive threads read consecutive 16-byte chunks.",
        attacks="uncoalesced-global: v1 loads one 4-byte float per thread per instruction; its ncu report "
        "shows 4 bytes used per 32-byte sector on global loads and stores.",
        predicted_gain="1.2-2x on the load phase; the grid stays B*H CTAs, so small-grid remains.",
    ),
    Variant(
        id="v3",
        slug="unrolled",
        title="Unrolled: query tiles across CTAs, 4 warps, register-tiled FFMA on conflict-free shared memory",
        dtypes=("float32",),
        head_dims=(32, 64, 128),
        min_cc=(7, 5),
        changed="Grid (ceil(N/BM), B*H): each CTA owns BM query rows (128 at D=32/64, 64 at D=128) of one "
        "(batch, head), causal CTAs stop at their last visible key tile; 128 threads per CTA, each holding a "
        "TM x TN tile of S = Q K^T and TM rows x D/8 columns of O in registers; inner loops over D and over "
        "the keys unrolled, every 16-byte shared load of Q/K (P/V) feeding 4*TM*TN FFMAs; sQ/sK rows padded "
        "to D+4 floats and sP to BN+8 so a warp's accesses hit distinct banks; Q pre-scaled by "
        "softmax_scale*log2(e), exp2 softmax, row sums reduced across lanes once at the end.",
        attacks="small-grid, occupancy-limited and latency-bound in v2's profile (H200, B8 H16 N1024 D64): "
        "grid 128 x block 32 (0.16 waves), 1.5 warps per scheduler, short-scoreboard stalls 62% (a shared "
        "load per FFMA), 5.5-way shared-memory bank conflicts, FP32 pipe at 0.8% of peak, 0.53 TFLOP/s.",
        predicted_gain="30-60x over v2 at B8 H16 N1024 D64 (65.2 ms -> 1.1-2.2 ms, 16-30 TFLOP/s, "
        "25-45% of the FFMA peak); synchronous K/V tile loads between barriers remain (v4).",
    ),
    Variant(
        id="v4",
        slug="double_buffer",
        title="Async K/V loads: v3 plus cp.async K/V copies that run under the matrix products",
        dtypes=("float32",),
        head_dims=(32, 64, 128),
        min_cc=(8, 0),
        changed="K and V tiles go global -> shared with cp.async.cg (16 bytes per thread, no registers, rows "
        "past seqlen_k zero-filled by the copy) instead of v3's LDG + STS between two barriers, each issued a "
        "matrix product before it is needed. D=64 keeps v3's 128 x 64 tile, single sK and sV and 103 KB "
        "(2 CTAs/SM) with FlashAttention-2's interleaved order: V(j) flies under S = Q K(j)^T, K(j+1) under "
        "P V(j), two barriers per tile. D=32 uses two stages of sK and sV; D=128 the interleaved order with "
        "split-phase mbarriers instead of CTA barriers (each the fastest measured for its D).",
        attacks="latency on the tile loads in v3, which is issue-bound (73% of issue slots, FMA pipe 64%): every "
        "K/V tile is loaded global -> register -> shared between two barriers, so a CTA's warps wait on the "
        "load (long scoreboard, 1.9% of stall samples) and the barrier once per tile, and the copies take "
        "issue slots.",
        predicted_gain="first two-stage design: 1.1-1.3x over v3 at B8 H16 N1024 D64; the interleaved schedule "
        "on v3's own tile (written before its first timing): 1.01-1.03x there, at most v3's 1.9% "
        "long-scoreboard stalls and the ~0.5% of instructions its LDG/STS copies cost.",
    ),
    Variant(
        id="v5",
        slug="mma",
        title="Tensor cores: FlashAttention-2 with mma.sync m16n8k16, fp16/bf16 in, fp32 accumulate",
        dtypes=("float16", "bfloat16"),
        head_dims=(64, 128),
        min_cc=(8, 0),
        changed="S = Q K^T and O += P V run on the tensor cores (mma.sync m16n8k16) instead of fp32 FFMA: "
        "4 warps x 32 query rows per CTA, 64-key tiles; K/V through padded (conflict-free) shared memory in "
        "a two-stage cp.async pipeline, read with ldmatrix (.trans for V); lazy O rescale (only when a row "
        "max grows by > 2^8, warp vote); P re-packed in registers as the A operand of P V; a mask-free "
        "steady loop, masking only ragged/diagonal tiles; causal CTAs skip fully masked tiles and run "
        "longest-first.",
        attacks="compute-bound on the FP32 pipe: v4's FFMA pipe is near its peak while the tensor pipe "
        "is idle (fp32 ceiling ~67 TFLOP/s against ~790 for dense 16-bit matrix products on an H200).",
        predicted_gain="~8-10x over the best fp32 rung: ~300 TFLOP/s fp16 at B=8,H=32,N=4096,D=64 and "
        "~340 at D=128, the level of SDPA's flash backend (FA2), which uses the same design.",
    ),
    Variant(
        id="v6",
        slug="wgmma",
        title="Hopper: wgmma + TMA, a producer warpgroup feeding consumer warpgroups (sm_90a)",
        dtypes=("float16", "bfloat16"),
        head_dims=(64, 128),
        min_cc=(9, 0),
        arch_flags=("-gencode=arch=compute_90a,code=sm_90a",),
        changed="S = Q K^T and O += P V run as warpgroup MMAs (wgmma m64nNk16, HGMMA in SASS) with Q, K and V "
        "read straight from 128-byte-swizzled shared memory and P from registers; a producer warpgroup "
        "(setmaxnreg 24) issues TMA copies (cp.async.bulk.tensor, zero-filled past the sequence) into a "
        "two-stage mbarrier ring of 128-key K and V tiles; consumer warpgroups own 64 query rows each (D=128: "
        "two per CTA, setmaxnreg 240; D=64: one, two CTAs per SM, or three for long non-causal keys); "
        "within a warpgroup the softmax of tile j runs while P V of tile j-1 is still on "
        "the tensor cores; causal blocks run longest-first.",
        attacks="tensor-path/instruction-issue limit of v5: mma.sync (HMMA, 16x8x16 per warp instruction, "
        "operands through ldmatrix and registers) reaches only 30-35% of the H200's dense FP16 peak, with "
        "the tensor pipe ~50-60% active in v5's ncu report; cuDNN's wgmma kernel is 1.4-1.9x faster.",
        predicted_gain="1.3-1.6x over v5 on the FlashAttention grid (450-550 TFLOP/s at D=128, 380-450 at "
        "D=64), about SDPA cuDNN's level.",
    ),
)


def all_ids() -> list[str]:
    return [v.id for v in VARIANTS]


def get(variant_id: str) -> Variant:
    """Look a rung up by id (`v2`) or label (`v2_float4`)."""
    for v in VARIANTS:
        if variant_id in (v.id, v.label()):
            return v
    raise LabError(f"unknown variant {variant_id!r}; known: {', '.join(all_ids())}",
                   hint="`lab variants` lists the rungs")


def select(spec: str) -> list[Variant]:
    """Parse a CLI selection: `all`, `v2`, or `v1,v3`."""
    spec = spec.strip()
    if spec == "all":
        return list(VARIANTS)
    ids = [s.strip() for s in spec.split(",") if s.strip()]
    if not ids:
        raise LabError("no variant given; use an id such as v2, a list such as v1,v2, or all")
    return [get(i) for i in ids]


def markdown_table() -> str:
    """The README's ladder table, generated so that it cannot drift from this registry."""
    lines = ["| rung | file | dtypes | what changed | bottleneck it attacks |", "| --- | --- | --- | --- | --- |"]
    for v in VARIANTS:
        cells = [f"**{v.id}** {v.title}", f"`kernels/{v.source.name}`", ", ".join(v.dtypes), v.changed, v.attacks]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
