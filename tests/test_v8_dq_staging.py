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


# ---------------------------------------------------------------------------------------------
# Step 5's candidate, FragDq<>: dQ's accumulator in the wgmma fragment's own order
# ---------------------------------------------------------------------------------------------

def frag_slot(t: int, p: int) -> int:
    """dq_stage's FragDq byte offset: thread t (of its warpgroup) stores accumulators 2p, 2p + 1 at
    slot p * 128 + t of the share."""
    return (p * 128 + t) * 8


def convert_frag(slot: int, split_rows: bool, cw: int) -> tuple[int, int]:
    """bwd_convert_frag_kernel's decode of one float2 slot of warpgroup cw's share, transcribed (step
    j of thread tid reads slot j * 256 + tid, puts its pair at tile row r, word `word`): the (row,
    col) of the block its pair goes to (BM x D; rows from 0 at the block's first)."""
    j, tid = divmod(slot, 256)
    p, t = 2 * j + (tid >> 7), tid & 127
    r, word = tile_place(p, t)
    row = (64 * cw if split_rows else 0) + r
    col = (0 if split_rows else cw * 64) + 2 * word
    return row, col


def tile_place(p: int, t: int) -> tuple[int, int]:
    """(tile row, 32-bit word of the row) where the convert puts slot p * 128 + t's pair."""
    lane = t & 31
    return 16 * (t >> 5) + (lane >> 2) + 8 * (p & 1), 4 * (p >> 1) + (lane & 3)


def test_the_frag_convert_tile_is_conflict_free_both_ways():
    """The shared tile (rows padded to kN / 2 + 4 words): a warp's pair stores (step j: one p, lanes
    0-31) hit 32 distinct banks, and a quarter-warp's 16-byte row reads (8 threads, 128 bytes) are one
    wavefront; every (row, 8-column chunk) of the 64 x kN share is written out once."""
    for kn in (64, 128):
        words = kn // 2 + 4
        assert (words * 4) % 16 == 0   # 16-byte aligned rows for the uint4 reads
        for p in range(kn // 4):
            for warp in range(4):
                banks = [(lambda rw: (rw[0] * words + rw[1]) % 32)(tile_place(p, 32 * warp + lane)) for lane in range(32)]
                assert len(set(banks)) == 32, (kn, p, warp)
        chunks = []
        for j in range(64 * kn // 8 // 256):
            step = [divmod(j * 256 + tid, kn // 8) for tid in range(256)]   # (r, c8) of each thread
            for q in range(0, 256, 8):   # a quarter-warp: 8 x 16 bytes
                start = [(r * words + 4 * c8) * 4 for r, c8 in step[q:q + 8]]
                assert sorted(start) == list(range(min(start), min(start) + 128, 16)), (kn, j, q)
            chunks += step
        assert sorted(chunks) == [(r, c) for r in range(64) for c in range(kn // 8)]


def test_frag_dq_stores_take_the_minimum_of_wavefronts():
    """A warp's float2 store of consecutive slots: two wavefronts for 256 bytes, the least possible
    (the swizzled boxes' float2 stores took four)."""
    for warp in range(4):
        for p in range(16):
            offsets = [frag_slot(32 * warp + lane, p) for lane in range(32)]
            assert shared_wavefronts_64bit(offsets) == 2, (warp, p)


def test_frag_dq_convert_puts_every_accumulator_where_the_fragment_holds_it():
    """The accumulator register i*4 + 2h + e of thread (warp, lane) holds row 16 warp + g + 8h, column
    8i + c2 + e of its warpgroup's share (the layout the swizzled staging above is checked against);
    register pair 2p, 2p + 1 is (i, h) = (p / 2, p % 2). The convert's decode of its slot must say
    the same, and cover the BM x D block once."""
    for split_rows, bm in ((False, 64), (True, 128)):   # D = 128 (BM 64, split by columns), D = 64 (BM 128, by rows)
        seen = set()
        for cw in range(2):
            for t in range(128):
                warp, lane = divmod(t, 32)
                g, c2 = lane >> 2, 2 * (lane & 3)
                for i in range(8):
                    for h in range(2):
                        p = (i * 4 + 2 * h) // 2   # the pair holding registers i*4 + 2h and + 1
                        row, col = convert_frag(frag_slot(t, p) // 8, split_rows, cw)
                        assert (row, col) == ((64 * cw if split_rows else 0) + 16 * warp + g + 8 * h,
                                              (0 if split_rows else 64 * cw) + 8 * i + c2), (cw, t, i, h)
                        seen |= {(row, col), (row, col + 1)}
        assert len(seen) == bm * (64 if split_rows else 128) and all(r < bm for r, _ in seen)


def test_the_frag_transcription_is_the_kernels():
    src = next(t for v in builtin() if v.kind == "cuda" and v.backward and "FragDq<" in (t := v.source.read_text()))
    stage = src[src.index("auto dq_stage = "):src.index("if (n_steps > 0) lab_mbar_wait(kv_full, 0);")]
    for line in ("(s_dqt(c) - lab_smem_addr(smem_raw)) + (warp * 32 + lane) * 8;",
                 "*reinterpret_cast<float2*>(share + p * 128 * 8) = make_float2(dq[2 * p], dq[2 * p + 1]);"):
        assert line in stage, line
    convert = src[src.index("bwd_convert_frag_kernel(const float*"):src.index("const char* bwd_launch_one")]
    for line in ("constexpr int D = C::D, kN = C::kDqN, kWords = kN / 2 + 4, kSlots = 64 * kN / 2;",
                 "const int p = 2 * j + (tid >> 7), t = tid & 127, lane = t & 31;",
                 "const int r = 16 * (t >> 5) + (lane >> 2) + 8 * (p & 1);",
                 "const int word = 4 * (p >> 1) + (lane & 3);",
                 "const float2 v = src[j * 256 + tid];",
                 "tile[r * kWords + word] = lab_pack2<T>(v.x * scale, v.y * scale);",
                 "const int row0 = mb * C::BM + (C::kDqSplitRows ? 64 * cw : 0);",
                 "const int col0 = C::kDqSplitRows ? 0 : cw * kN;",
                 "const int e = j * 256 + tid, r = e / (kN / 8), c8 = e % (kN / 8);",
                 "if (row0 + r < nq)",
                 "dq + ((bh * nq + row0 + r) * D + col0 + 8 * c8)",
                 "*reinterpret_cast<const uint4*>(&tile[r * kWords + 4 * c8])"):
        assert line in convert, line
    writer = src[src.index("if constexpr (C::kDqFrag) {   // the share as one 1-D bulk reduction"):][:400]
    assert "((size_t)bh_q * (nq_pad / BM) + m0 / BM) * C::kConsumers + cw" in writer
    assert "dq_acc + share * (C::kDqTileTBytes / 4), s_dqt(cw), C::kDqTileTBytes" in writer
