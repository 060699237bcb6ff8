"""v8's TMA-dQ staging layout (kernels/v8_wgmma_bwd.cu, dq_stage), checked on the CPU.

Each consumer thread stores its dQ accumulators (the wgmma m64nNk16 fragment: row 16 warp + g + 8h,
columns 8i + c2 and 8i + c2 + 1) as float2 into a shared-memory tile that a TMA tensor reduction then
reads through an fp32 map with the 128-byte swizzle, in boxes of [64 rows x 32 floats]. Two things
must hold, and a GPU run shows neither directly (a wrong address is a wrong dQ somewhere, a bank
conflict only time): every element lands where the swizzled box expects it (the PTX ISA's 128-byte
swizzle: 16-byte chunk c of row r at c ^ (r % 8) within each 1024-byte group of 8 rows), and each
warp-wide float2 store is conflict-free (256 bytes: two wavefronts, each bank hit twice at most).
The addressing below is the kernel's, transcribed; the drift check ties the two together.
"""

from __future__ import annotations

from collections import Counter

from conftest import REPO
from lab.ladder.registry import builtin

BOX_BYTES = 64 * 128


def staging_offset(warp: int, lane: int, h: int, i: int) -> int:
    """dq_stage's byte offset of the float2 (i, h) of thread (warp, lane), as the kernel computes it."""
    g, c2 = lane >> 2, 2 * (lane & 3)
    x = (c2 >> 2) ^ g
    rows = (warp * 16 + g) * 128 + (c2 & 3) * 4
    return rows + (i // 4) * BOX_BYTES + h * 8 * 128 + (((2 * (i % 4)) ^ x) << 4)


def tma_offset(row: int, col: int) -> int:
    """Where a [64 x 32 fp32] box with the 128-byte swizzle holds element (row, col) of the share."""
    box, c = divmod(col, 32)
    chunk, within = divmod(c * 4, 16)
    return box * BOX_BYTES + row * 128 + ((chunk ^ (row % 8)) * 16) + within


def test_every_dq_element_lands_where_the_swizzled_box_expects_it():
    for n_cols in (64,):  # kDqN: 64 at D=128 (split by columns) and at D=64 (split by rows)
        seen = {}
        for warp in range(4):
            for lane in range(32):
                g, c2 = lane >> 2, 2 * (lane & 3)
                for h in range(2):
                    for i in range(n_cols // 8):
                        row, col = warp * 16 + g + 8 * h, 8 * i + c2
                        off = staging_offset(warp, lane, h, i)
                        assert off == tma_offset(row, col) and off + 4 == tma_offset(row, col + 1), (warp, lane, h, i)
                        seen[off] = (row, col)
        assert len(seen) == 64 * n_cols // 2  # each float2 slot once: the share covered, nothing overwritten


def test_each_warps_float2_store_is_conflict_free():
    for warp in range(4):
        for h in range(2):
            for i in range(8):
                banks = Counter()
                for lane in range(32):
                    off = staging_offset(warp, lane, h, i)
                    banks[(off // 4) % 32] += 1
                    banks[(off // 4 + 1) % 32] += 1
                assert max(banks.values()) == 2, (warp, h, i, banks)  # 64 words over 32 banks: 2 wavefronts


def test_the_transcription_is_the_kernels():
    src = next(t for v in builtin() if v.kind == "cuda" and v.backward and "TmaDq<" in (t := v.source.read_text()))
    stage = src[src.index("auto dq_stage = "):src.index("if (n_steps > 0) lab_mbar_wait(kv_full, 0);")]
    for line in ("uint32_t x = (c2 >> 2) ^ g;",
                 "+ (warp * 16 + g) * 128 + (c2 & 3) * 4;",
                 "const uint32_t off = (i / 4) * C::kDqBoxBytes + h * 8 * 128 + (((2 * (i % 4)) ^ x) << 4);",
                 "make_float2(dq[i * 4 + 2 * h], dq[i * 4 + 2 * h + 1])"):
        assert line in stage, line
    assert "kDqBoxBytes = 64 * 128" in src
    tma = (REPO / "kernels" / "hopper" / "tma_pipeline.cuh").read_text()
    f32_map = tma[tma.index("lab_tma_map_3d_f32("):]
    for line in ("const cuuint32_t box[3] = {32, (cuuint32_t)box_rows, 1};", "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
                 "CU_TENSOR_MAP_SWIZZLE_128B"):
        assert line in f32_map[:1200], line
