"""v8's TMA-dQ staging layout (kernels/v8_wgmma_bwd.cu, dq_stage), checked on the CPU.

Each consumer thread stores its dQ accumulators (the wgmma m64nNk16 fragment: row 16 warp + g + 8h,
columns 8i + c2 and 8i + c2 + 1) as float2 into a shared-memory tile that a TMA tensor reduction then
reads through an fp32 map with the 128-byte swizzle, in boxes of [64 rows x 32 floats]. Two things
should hold, and a GPU run shows neither directly (a wrong address is a wrong dQ somewhere, a bank
conflict only time): every element lands where the swizzled box expects it (the PTX ISA's 128-byte
swizzle: 16-byte chunk c of row r at c ^ (r % 8) within each 1024-byte group of 8 rows), and each
warp-wide float2 store is conflict-free. The first holds; the second does not (four wavefronts per
store, as Nsight Compute measured: the test below says why).
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


def shared_wavefronts_64bit(offsets: list[int]) -> int:
    """Wavefronts of one warp-wide 64-bit shared store at these byte offsets: the hardware serves a
    64-bit access per half-warp, and within a half-warp each bank takes one 4-byte word per wavefront
    (two threads writing the same word do not conflict)."""
    total = 0
    for half in (offsets[:16], offsets[16:]):
        words_per_bank: dict[int, set[int]] = {}
        for off in half:
            for word in (off // 4, off // 4 + 1):
                words_per_bank.setdefault(word % 32, set()).add(word)
        total += max(len(w) for w in words_per_bank.values())
    return total


def test_each_warps_float2_store_takes_four_wavefronts_as_nsight_counted():
    """Not conflict-free: four wavefronts per store where two would do. Held as measured, so that a
    layout that fixes it (benchmarks/v8_notes.md, step 4's next steps, item 1) changes this test.

    The first model here counted banks over the whole warp (64 words over 32 banks: two wavefronts)
    and passed; Nsight Compute then counted 33.5M shared-store wavefronts beyond the minimum over the
    16.8M staging stores of the TMA-dQ kernel at 4,16,4096,128 (H200, 2026-11-27): two more per store.
    Per half-warp (rows g = 0..3 of the fragment), the swizzle's XOR (row % 8) and the quad's own
    chunk bit both toggle chunk bit 0, so 16 threads meet 4 chunks x 2 halves: two words per bank."""
    for warp in range(4):
        for h in range(2):
            for i in range(8):
                offsets = [staging_offset(warp, lane, h, i) for lane in range(32)]
                assert shared_wavefronts_64bit(offsets) == 4, (warp, h, i)


def test_the_wavefront_model_counts_a_conflict_free_store_as_two():
    """The model itself: consecutive 8-byte slots (each half-warp 128 contiguous bytes) take one
    wavefront per half-warp; every thread of a half-warp on one bank-word column takes sixteen."""
    assert shared_wavefronts_64bit([8 * lane for lane in range(32)]) == 2
    assert shared_wavefronts_64bit([128 * lane for lane in range(32)]) == 32


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
