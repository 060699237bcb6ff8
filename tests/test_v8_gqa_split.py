"""How far v8's GQA backward splits a K/V head's group of query heads over CTAs, asked of the host
function itself (kernels/bwd_gqa_split.cuh's gqa_splits, compiled by nvcc into a small host program:
no GPU), so that a change of the rule shows here before any GPU run.

The default (kGqaSplitDefault = kCausalBalance since 2026-11-27, 1.276x at 1,32:4,8192,64 causal fp16
on an H100; benchmarks/v8_notes.md "Causal GQA") splits as kFillSms does (only until the grid holds one
CTA per SM), then, causal only, on until the longest CTA (key block 0) holds at most half of an SM's
fair share of the query steps. Pinned: the notes' shapes on 132 SMs (H100 SXM, H200), a GPU with
fewer SMs, the rule's properties over many shapes, and v8's launchers taking the header's default.
The GPU side (the split grids checked against float64, the bits of dK and dV): tests/test_gqa_gpu.py.
"""

from __future__ import annotations

import random
import re
import subprocess
import textwrap

import pytest

from conftest import REPO, host_program
from lab.ladder.registry import builtin

# The Hopper backward rung that declares GQA (named through the registry, not by id).
V8 = next(v for v in builtin() if v.kind == "cuda" and v.backward and v.gqa)

# One line per problem: "batch heads heads_kv seqlen_q seqlen_k causal sms bm" -> the splits of the
# default, of kFillSms and of kCausalBalance.
DRIVER = textwrap.dedent(r"""
    #include "bwd_gqa_split.cuh"
    #include <cstdio>
    using namespace lab_bwd;
    int main() {
      int b, h, hkv, nq, nk, causal, sms, bm;
      while (scanf("%d %d %d %d %d %d %d %d", &b, &h, &hkv, &nq, &nk, &causal, &sms, &bm) == 8) {
        LabBackwardArgs a{};
        a.batch = b, a.heads = h, a.heads_kv = hkv, a.seqlen_q = nq, a.seqlen_k = nk, a.causal = causal;
        printf("%d %d %d\n", gqa_splits(&a, sms, bm), gqa_splits(&a, sms, bm, GqaSplit::kFillSms),
               gqa_splits(&a, sms, bm, GqaSplit::kCausalBalance));
      }
      return 0;
    }
""")

# v8's default BM (query rows per step): 128 at D = 64, 64 at D = 128 (BwdDefault64/128).
BM = {64: 128, 128: 64}


def split_decisions(tmp_path_factory, problems) -> list[tuple[int, int, int]]:
    """(default, kFillSms, kCausalBalance) for each (B, H, Hkv, Nq, Nk, causal, SMs, BM), from the header."""
    exe = host_program(tmp_path_factory, DRIVER, "the GQA split is compiled from kernels/bwd_gqa_split.cuh")
    text = "\n".join(" ".join(str(int(x)) for x in p) for p in problems) + "\n"
    res = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = [tuple(int(x) for x in line.split()) for line in res.stdout.splitlines()]
    assert len(out) == len(problems), res.stdout[-2000:]
    return out


@pytest.fixture(scope="module")
def decide(tmp_path_factory):
    return lambda problems: split_decisions(tmp_path_factory, problems)


# (B, H, Hkv, N, D, causal, SMs) -> (the default's splits, kFillSms's): the GQA sweep's shapes as
# v8_notes.md computed them before the measurement, and their neighbours.
PINNED = [
    ((1, 32, 4, 8192, 64, True, 132), (4, 1)),     # measured 1.276x: key block 0's 512 steps -> 128 (fair 504)
    ((1, 32, 4, 8192, 64, False, 132), (1, 1)),    # non-causal: uniform CTAs, no further split
    ((2, 32, 8, 1000, 128, True, 132), (4, 2)),    # measured 1.005x (already split 2 ways)
    ((4, 32, 8, 4096, 128, True, 132), (1, 1)),    # longest 256 steps, a quarter of its fair share
    ((4, 32, 8, 4096, 128, False, 132), (1, 1)),
    ((1, 32, 8, 3001, 64, True, 132), (4, 1)),     # tests/test_gqa_gpu.py's causal bf16 case
    ((1, 32, 4, 8192, 64, True, 114), (2, 1)),     # 114 SMs (H100 PCIe): fair share 583, 2 splits do
    ((4, 16, 16, 8192, 128, True, 132), (1, 1)),   # no GQA: never split
    ((2, 8, 1, 1, 128, True, 132), (8, 8)),        # MQA, one query row: the grid fills the SMs only split
]


def test_the_split_of_the_notes_shapes_is_pinned(decide):
    got = decide([(b, h, hkv, n, n, causal, sms, BM[d]) for (b, h, hkv, n, d, causal, sms), _ in PINNED])
    for (shape, (default, fill)), (d_got, fill_got, balance_got) in zip(PINNED, got):
        assert (d_got, fill_got) == (default, fill), (shape, d_got, fill_got)
        assert d_got == balance_got, shape   # the default is kCausalBalance


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_the_split_follows_its_stated_rule_on_many_shapes(decide):
    """The header's words, checked against its code: a divisor of the group; kFillSms the fewest that
    give one CTA per SM; kCausalBalance, causal, the fewest from there whose longest CTA holds at most
    half an SM's fair share of query steps (the group when none does); non-causal, kFillSms's."""
    rng = random.Random(27)
    problems = []
    for _ in range(400):
        hkv = rng.choice([1, 2, 4, 8, 33])
        group = rng.choice([1, 2, 3, 4, 6, 8, 16])
        nq, nk = rng.choice([1, 63, 128, 300, 1000, 2049, 4093, 8192]), rng.choice([64, 129, 1000, 4096, 8192])
        problems.append((rng.choice([1, 2, 4]), hkv * group, hkv, nq, nk, rng.random() < 0.6,
                         rng.choice([78, 114, 132]), rng.choice([64, 128])))
    seen = set()
    for p, (default, fill, balance) in zip(problems, decide(problems)):
        b, h, hkv, nq, nk, causal, sms, bm = p
        group, ctas = h // hkv, _cdiv(nk, 128) * b * hkv
        divisors = _divisors(group)
        assert default == balance and fill in divisors and balance in divisors, p
        assert fill == next(d for d in divisors if d == group or ctas * d >= sms), p
        if not causal:
            assert balance == fill, p
            continue
        longest = _cdiv(nq, bm)
        steps = sum(max(_cdiv(nq, bm) - j * 128 // bm, 0) for j in range(_cdiv(nk, 128)))
        fair = steps * b * h // sms
        assert balance == next(d for d in divisors if d >= fill and (d == group or 2 * longest * (group // d) <= fair)), p
        seen.add("further" if balance > fill else "as kFillSms")
    assert seen == {"further", "as kFillSms"}, seen   # the shapes reach both outcomes


def test_v8s_launchers_split_by_the_headers_default_and_keep_the_old_split_as_a_candidate():
    """Every launch template of v8 defaults to kGqaSplitDefault (the plain launcher and --deterministic
    take it), and each head dim has a tuning candidate with the split before it (kFillSms)."""
    src = V8.source.read_text()
    assert '#include "bwd_gqa_split.cuh"' in src
    defaults = re.findall(r"GqaSplit SPLIT = ([\w:]+)>", src)
    assert len(defaults) == 2 and set(defaults) == {"lab_bwd::kGqaSplitDefault"}, defaults
    header = (REPO / "kernels" / "bwd_gqa_split.cuh").read_text()
    assert "constexpr GqaSplit kGqaSplitDefault = GqaSplit::kCausalBalance;" in header
    old = re.findall(r'\{"(BM\d+ [^"]*GQA-fill-SMs)", bwd_launch<BwdDefault(\d+), GqaSplit::kFillSms>\}', src)
    assert {(label.split()[0], d) for label, d in old} == {("BM128", "64"), ("BM64", "128")}, old
    assert "int gqa_splits(" not in src and "lab_bwd::gqa_splits(" in src   # the header's, not a copy
    # the plain build's workspace is sized with the default's BM at each head dim
    assert re.search(r"gqa_splits\(a, sms, a->head_dim == 64 \? BwdDefault64::BM : BwdDefault128::BM\)", src)
