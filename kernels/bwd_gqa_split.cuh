// Flash Lab: how far a GQA backward splits a K/V head's group of query heads over CTAs (host code).
// v8_wgmma_bwd runs one CTA per (key block of 128 keys, K/V head) that loads K and V once and keeps
// dK and dV in registers across the group's query heads; its grid is group times smaller than one CTA
// per query head, so the group is split (each share's dK and dV an fp32 partial, summed in split
// order by bwd_prepost.cuh's bwd_sum_partials_kernel: the same bits on every run) where that grid
// would leave SMs idle or one CTA would hold too much of the work. Kept apart from the kernels so
// that the decision can be compiled and asked on the CPU (tests/test_v8_gqa_split.py pins it).
#pragma once

#include "common.cuh"

namespace lab_bwd {

// The key block of every CTA of the split grid (the workspace's partials are sized with it).
constexpr int kGqaKeyBlock = 128;

// kFillSms: split only until the grid holds one CTA per SM (the default until 2026-11-27).
// kCausalBalance (the default since; v8_notes.md "Causal GQA", 1.276x at 1,32:4,8192,64 causal fp16
// on an H100): kFillSms's splits, then, under the causal mask only, further until the longest CTA
// (key block 0: every query block of each of its heads) holds at most half of an SM's fair share of
// the query steps (all (key block, query head) slices' steps / SMs). With few K/V heads one causal
// CTA can be a whole SM's share (1,32:4,8192,64: 512 steps against 504), which no dispatch order
// balances. Non-causal CTAs are uniform: kCausalBalance leaves them as kFillSms does.
enum class GqaSplit { kFillSms, kCausalBalance };
constexpr GqaSplit kGqaSplitDefault = GqaSplit::kCausalBalance;

static inline int gqa_next_divisor(int splits, int group) {   // the next split count that divides the group
  do ++splits;
  while (group % splits);
  return splits;
}

// The query steps (of bm rows) of one query head's (key block) CTA-slices under the causal mask
// (top-left aligned, as SDPA's is_causal: query i sees keys <= i), summed over the key blocks. Key
// block 0's slice, the longest, sees all cdiv(seqlen_q, bm) query blocks.
static inline long long gqa_causal_steps(const LabBackwardArgs* a, int bm) {
  const long long q_blocks = lab_cdiv(a->seqlen_q, bm);
  long long total = 0;
  for (int j = 0; j < lab_cdiv(a->seqlen_k, kGqaKeyBlock); ++j) {
    const long long first = (long long)j * kGqaKeyBlock / bm;
    total += first < q_blocks ? q_blocks - first : 0;
  }
  return total;
}

// CTAs per K/V head (a divisor of the group; 1 without GQA) on a GPU of `sms` SMs, with bm query
// rows per step (the configuration's BM).
static inline int gqa_splits(const LabBackwardArgs* a, int sms, int bm, GqaSplit policy = kGqaSplitDefault) {
  const int group = a->heads_kv >= 1 ? a->heads / a->heads_kv : 1;
  if (group <= 1) return 1;
  const long long ctas = (long long)lab_cdiv(a->seqlen_k, kGqaKeyBlock) * a->batch * a->heads_kv;
  int splits = 1;
  while (splits < group && ctas * splits < sms) splits = gqa_next_divisor(splits, group);
  if (policy == GqaSplit::kCausalBalance && a->causal) {
    const long long per_head_longest = lab_cdiv(a->seqlen_q, bm);
    const long long fair = gqa_causal_steps(a, bm) * a->batch * a->heads / sms;
    while (splits < group && 2 * per_head_longest * (group / splits) > fair) splits = gqa_next_divisor(splits, group);
  }
  return splits;
}

}  // namespace lab_bwd
