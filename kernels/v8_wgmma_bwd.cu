// v8_wgmma_bwd: the backward on Hopper's own instructions (wgmma + TMA, warp-specialised), fp16 and
// bf16, head dims 64 and 128, causal and not; its forward is v6's kernel writing the LSE. sm_90a only.
//
// What changed since v7: the backward's main loop leaves mma.sync (HMMA m16n8k16, every operand
//   through ldmatrix into registers) for warpgroup MMAs (wgmma m64nNk16) that read their shared-memory
//   operands directly, and its loads leave cp.async for TMA driven by a producer warp. One CTA per
//   (key block of 128 keys, b, h): K_j and V_j arrive once by TMA; Q_i, dO_i and the row statistics
//   (LSE in log2 units, D = rowsum(dO * O)) stream through a 2-stage ring of mbarrier-guarded slots
//   (tensor boxes for the tiles, plain bulk copies for the statistics). Two consumer warpgroups
//   (setmaxnreg 240; producer 24) own 64 keys each and compute, per query block, the transposed tiles
//   S^T = K Q^T and dP^T = V dO^T (wgmma smem x smem, keys as M), so that P^T and dS^T leave the
//   accumulators as wgmma's register A operand: dV += P^T dO and dK += dS^T Q run from registers
//   against dO and Q in shared memory (MN-major), with dK and dV in fp32 registers for the whole
//   loop. dS^T is stored once to shared memory (128-byte swizzle, two buffers) and dQ = dS K is one
//   more wgmma with both operands MN-major, split between the warpgroups (by query rows at BM = 128,
//   by head-dim columns at BM = 64), added into the fp32 accumulator with red.global.add.v2.f32 as
//   v7 does. Preprocess and convert are v7's (bwd_prepost.cuh); the forward is v6's
//   (hopper/fwd_wgmma.cuh with WRITE_LSE). FlashAttention-3's backward (hopper/
//   mainloop_bwd_sm90_tma_gmma_ws.hpp) has this schedule; this file is written against the PTX ISA.
// Bottleneck it attacks: v7's main loop is bound by shared-memory operand traffic. Its stored
//   profile (profiles/examples/20261125-211819-v7-B4-H16-N2048-D128-float16, H100, `lab profile
//   --variant v7 --mode bwd`): the main kernel is 95% of the backward's time, L1TEX throughput 73%
//   (ldmatrix wavefronts: 184 ldmatrix.x4 per 320 mma.sync per warp and step), stalls short
//   scoreboard and MIO throttle, tensor pipe 38% busy; 120-258 TFLOP/s on the fa-grid, 0.47-1.09x
//   cuDNN. wgmma reads its B operands (and S^T's and dQ's A operands) from shared memory in the
//   tensor core's own path, with no register-file round trip and no ldmatrix.
// Predicted gain (written before measuring): 1.4-1.8x over v7's backward on the fa-grid at N >= 2048
//   (the tensor pipe from 38% to 55-65% busy: 330-420 TFLOP/s at D=128, 280-350 at D=64), about
//   0.7-0.85x cuDNN: this first step still adds dQ by per-element global reductions (v7's traffic,
//   nk/128 x nq x D x 4 bytes per head) and serialises each warpgroup's five products (no overlap of
//   one step's softmax with another's products); short N (<= 1024) gains less (per-CTA prologue).
// Measured (NVIDIA H100 80GB HBM3, 2026-11-26; `lab sweep --variant v7,v8 --preset fa-grid --mode bwd
//   --dtype float16,bfloat16 --baselines sdpa-cudnn,sdpa-flash`, side by side in one process, shipped as
//   profiles/examples/20261126-155437-sweep-fa-grid-v8-bwd and exported into benchmarks/RESULTS.md):
//   backward 136-401 TFLOP/s fp16, 137-417 bf16. v8 / v7: 1.37-1.68x at N >= 2048 (1.12-1.46x at
//   N <= 1024); v8 / SDPA FlashAttention-2 1.26-1.71x (48 of 48 cells ahead); v8 / cuDNN 0.72-1.19x,
//   >= 1.0 in 9 of 48 cells (N <= 1024 only); D=128 non-causal N >= 8192: 386-417 TFLOP/s against
//   cuDNN's 504-547 (0.72-0.80x). The prediction held for v7 (1.4-1.8x at N >= 2048: measured
//   1.37-1.68x) and roughly for TFLOP/s at N >= 2048 (D=128 295-417 for 330-420 predicted, D=64
//   261-400 for 280-350);
//   against cuDNN it was 0.7-0.85x, measured 0.72-0.96x at N >= 2048. Correct on every shape of
//   `lab check --variant v8 --mode bwd` (24) and of benchmarks/v7_dev.py check --rung v8 (56: fp16
//   and bf16, D 64/128, causal and not, N = 1, odd N, Nq != Nk, large logits); compute-sanitizer
//   memcheck, racecheck and synccheck clean. ptxas (nvcc 13.0): 168 registers at the launch bound,
//   consumers 240 by setmaxnreg, no spills; 162-163 KB of shared memory (one CTA per SM). Step 2, dQ by bulk reductions of a
//   staged tile (BULK_DQ), is a tuning candidate: correct, 0.95-1.07x the default, inside its run's
//   noise (the default stays). The iteration log and the next steps (overlapping one step's
//   exponentials and reductions with the other products): benchmarks/v8_notes.md.
// Profile it: lab profile --variant v8 --dtype float16 --mode bwd
//
// GQA (`gqa = true`: K and V with Hkv heads, query head h reads K/V head h / (H/Hkv); common.cuh's
//   GQA contract; added after the measurement above, checked on the CPU by compiling only, its GPU
//   check and timing are benchmarks/v8_notes.md's). The forward is hopper/fwd_wgmma.cuh's GQA
//   instantiation (the producer loads K/V row bh / (H/Hkv)). The backward runs a K/V head's group
//   inside one CTA: per (key block, K/V head) K_j and V_j are loaded once and the group's query
//   heads stream through the same Q/dO ring one after another, dK and dV summed in the fp32
//   registers they already live in, then written once in 16 bits: no atomics, no fp32 copy of dK
//   and dV, the same bits on every run, and K/V read once per group. FlashAttention-3 keeps one CTA
//   per query head instead and adds each CTA's dK, dV into fp32 accumulators by TMA reduce-add
//   (semaphore-ordered when deterministic) before a convert: a grid H/Hkv times larger, paid for with
//   fp32 dK/dV traffic per query head and order-dependent sums or waits. Here the grid is H/Hkv times
//   smaller, so where it would not fill the SMs once (short sequences, small B*Hkv, MQA) the group is
//   split over the fewest CTAs that do, and under the causal mask further, until no CTA holds more
//   than half an SM's fair share of the work (bwd_gqa_split.cuh's gqa_splits; "Causal GQA split"
//   below), each share writing its fp32 partials in the workspace that bwd_sum_partials_kernel
//   (bwd_prepost.cuh) adds in split order: deterministic too. dQ reaches its fp32 accumulator by RED as without GQA (its last bits order-dependent, as
//   before). GQA is a template argument: the kernels without it are the same SASS as before
//   (cuobjdump -sass, instruction by instruction, nvcc 13.0: v8 34 of 34, v6 10 of 10, v9 20 of 20);
//   the GQA instantiations hold 168 registers at the launch bound with no spills.
//
// Step 3 (tuning candidates; v8_notes.md has the predictions, written first, the measurement and
//   the GPU commands that make overlap-FA3 the default). Evidence: step 1's 386-417 TFLOP/s against
//   cuDNN's 504-547 at D=128 non-causal, N >= 8192 (H100), with each warpgroup waiting for all of its
//   products twice per step. Overlapped<C, 1> ("overlap-FA3", FlashAttention-3's order within a
//   step): dV issued before the dS^T stores, dQ before dK, wait<1> retires dV and dQ only, dO's stage
//   released then, dQ's RED issued while dK runs, Q's stage released after wait<0>. Overlapped<C, 2>
//   ("overlap-next"): as 1, and the next step's S^T issued (after its q_full wait) before this step's
//   RED, retired by the next step's wait<1>; its dP^T stays at the top of the step (both next
//   accumulators beside dQ's, dK's and dV's would pass 240 registers). The last step is a copy of
//   its own without the look-ahead: a wgmma issued under a runtime condition made ptxas serialise
//   every wgmma of the kernel (its C7515 notice). Also 3 stages of the Q/dO ring (195-196 KB).
//   Predicted: overlap-FA3 1.03-1.08x, overlap-next 1.06-1.15x the default at 4,16,8192,128 fp16
//   (the tensor pipe busier, fewer wgmma-wait stalls), 3 stages 0.98-1.02x. The default kernels are
//   the same SASS as before (cuobjdump -sass, nvcc 13.0: 64 of 64; tuning build 80 of 80); the 48
//   new kernels 0 spills, at most 238 of the consumers' 240 registers, no C7515. Their barrier
//   protocol, replayed on the CPU: tests/test_bwd_pipeline_model.py.
//   Measured (one H200 of four beside other GPU work, 2026-11-27, commit 28e592a, `lab tune
//   --variant v8 --mode bwd`, fp16, every candidate gated and every timed call checked): at
//   4,16,8192,128 the default 13.167 ms (417.5 TFLOP/s), overlap-FA3 11.729 ms (468.7 TFLOP/s, CI95
//   11.72-11.73): 1.123x, above its 1.03-1.08x; at 16,16,1024,128 1.078x (1.0900 -> 1.0109 ms).
//   3 stages 1.02x (the ring is not the bound), bulk-dQ 1.01x. overlap-next 0.94x and 0.95x (S2 and
//   S3), a miss: ptxas serialises every wgmma of its 24 kernels (C7514: its next S^T stays in flight
//   across the loop's back-edge; SASS 64 HGMMA, 64 WARPGROUP.DEPBAR against overlap-FA3's 32 and 4),
//   which step 3's compile check (C7515 only) let through. Taken: overlap-FA3 is the default at
//   D = 128 (BwdDefault128; its kernels are the candidate's, cuobjdump -sass 8 of 8 instruction for
//   instruction, D = 64's unchanged). D = 64 keeps order 0: overlap-FA3's causal kernels spill there.
//   Measured after the flip (two H200s, 2026-11-27, commit c98dadc): `lab check --mode bwd` 24 shapes
//   passed in fp16 and bf16, compute-sanitizer memcheck, racecheck, synccheck clean, the GPU tests
//   (backward 6, GQA 33, tune 9) passed; `lab tune` at 4,16,8192,128: causal fp16 6.130 ms (448.4
//   TFLOP/s) against order 0's 6.796 ms (1.109x), bf16 non-causal 11.730 ms (468.7) against 13.149
//   (1.121x). The honest grid (profiles/examples/20261127-030127-sweep-honest-grid): v8's backward
//   0.85-1.07x SDPA cuDNN in fp16 (>= 1.0 in 5 of 24 cells), 0.83-1.11x in bf16 (4 of 24), events
//   timing; D = 128 non-causal N >= 8192 462-472 TFLOP/s against cuDNN's 514-538.
//
// Step 4 (tuning candidates, TmaDq<>; v8_notes.md has the prediction, written before any run, and
//   the GPU commands). Evidence: the lab's profile of the new default (4,16,4096,128 fp16, H200,
//   profiles/examples/20261127-031243-v8-B4-H16-N4096-D128-float16): 46.7% of the tensor peak; dQ's
//   16.8M REDG are 37% of L2's sectors, and the lines around them hold ~30% of the stall samples
//   (lg_throttle at the REDG, long scoreboard where the next step reuses their source registers).
//   Design: each consumer warpgroup stores its fp32 dQ share into a swizzled staging buffer (the
//   boxes of dQ's fp32 tensor map), fences and arrives; a dQ-writer warp in the producer warpgroup
//   issues one TMA tensor reduction (cp.reduce.async.bulk.tensor .add) per box and, once the engine
//   has read the buffers, arrives on the next step's dS^T named barrier, before which no consumer
//   stores dQ again: no consumer waits on a reduction. Predicted: 1.05-1.12x the default
//   at 4,16,8192,128 fp16, 1.04-1.10x at 4,16,2048,128, 1.04-1.12x at D = 64 (order 0); in Nsight
//   Compute no REDG, lg_throttle ~0, long scoreboard from 34% to <= 20% of the stalls. Compiled
//   (nvcc 13.0): the 16 TMA-dQ kernels 0 spills, none serialised; the default kernels the same SASS
//   as before, instruction by instruction.
//   Measured (four H200s, 2026-11-27, commit e3bf36b; each command on one GPU while the others ran
//   other lab work): `benchmarks/v7_dev.py check --rung v8 --tuning` 0 failures (56 shapes, fp16 and
//   bf16, the default and every candidate, ragged nq: the map's clipping), compute-sanitizer memcheck,
//   racecheck and synccheck clean on `sanitize --rung v8 --tuning`. `lab tune --mode bwd`, every
//   candidate gated and every timed call checked: **4,16,8192,128 fp16 1.258x** (9.445 against 11.878
//   ms, 582.1 TFLOP/s), 4,16,2048,128 1.211x (468.3 TFLOP/s), D = 64 4,16,8192,64 1.171x (452.3),
//   GQA 2,32:8,1000,128 bf16 causal 1.110x: above every predicted range. Nsight Compute at
//   4,16,4096,128 (one call of each configuration): 2,367 against 2,979 us; tensor pipe 58.7% of peak
//   (46.6%); REDG 0, UTMAREDG 524,288 and the same 134M reduction sectors in L2 (as predicted); L2
//   56.5% busy (66.3%: fewer, whole-box requests; predicted within 5 points, a miss on the good
//   side); long scoreboard still 30% of the stalls (predicted <= 20%: a miss), MIO throttle 13%.
//   Taken: TMA-dQ is the default at both head dims (BwdDefault64/128 are the candidates' types: the
//   plain build's 16 backward kernels are the tuning build's TMA-dQ kernels, cuobjdump -sass
//   instruction for instruction, nvcc 13.0; its 48 other kernels unchanged). What the profile shows next (v8_notes.md
//   "Step 4 measured"): the consumers' new lines hold 15% of the stall samples (predicted <= 5%):
//   the staging stores (16.8M warp STS.64: 33.5M shared wavefronts beyond the minimum, four per
//   store where a conflict-free 64-bit store takes two; MIO throttle) 6.2%, the proxy fence
//   (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC, waiting for those stores) 5.3%, the dq_full arrive 3.6%.
//
// Step 5 (FragDq<>: the default at D = 64; a tuning candidate at D = 128). Evidence: step 4's
//   profile above (the staging stores four wavefronts where two would do; with the fence 11.5% of
//   the stall samples). Change: dQ's fp32 accumulator in the wgmma fragment's own order, so a
//   half-warp's float2 stores are 128 contiguous bytes (two wavefronts a store: the minimum), the dQ writer adds a warpgroup's share with one 1-D bulk reduction, and a
//   convert of its own reads that order back (FlashAttention-3's SM90 layout of dQaccum). Predicted
//   (v8_notes.md, before any run): 1.02-1.05x the TMA-dQ default at 4,16,8192,128 and at D = 64,
//   1.01-1.04x at 4,16,2048,128; in Nsight Compute the staging line's excess wavefronts 0 (33.5M)
//   and staging + fence + arrive <= 8% of the stall samples (15%).
//   Measured (four H200s, 2026-11-27, commit 226d993; `lab tune --mode bwd`, fp16 unless said, every
//   candidate gated and every timed call checked, one GPU while the others ran other lab work):
//   D = 64 4,16,8192,64 **1.045x** TMA-dQ (6.042 -> 5.779 ms, 475.7 TFLOP/s): inside its range. D =
//   128: 4,16,8192,128 1.008x (9.408 -> 9.327 ms, 589.4 TFLOP/s; CI95s overlap), below its 1.02-1.05x;
//   4,16,2048,128 0.983x and GQA 2,32:8,1000,128 bf16 causal 0.986x, below 1.01-1.04x: misses. At D =
//   128 Nsight Compute (4,16,4096,128, main kernels only) has the main kernel gaining as predicted:
//   2,311 against 2,382 us (1.031x), tensor pipe 60.1% of peak (58.3%), the shared-store conflicts
//   (33.5M excess wavefronts) gone; so the end-to-end miss is the frag convert (not profiled; it
//   writes dQ in 4-byte pairs) taking back what the main kernel saved. Checked: `v7_dev.py check --rung v8 --tuning` 0 failures, compute-sanitizer memcheck,
//   racecheck, synccheck clean. Taken at D = 64 only (BwdDefault64 = FragDq<BwdConfig<64,128,2,false>>:
//   the candidate's own type; the plain build's D = 64 backward kernels are the tuning build's
//   frag-dQ kernels, cuobjdump -sass instruction for instruction).
//
// Step 5b (the frag convert rewritten; v8_notes.md). Evidence: step 5's profile above (the main
//   kernel 1.031x, the end-to-end 1.008x: the old convert cost about 3x the row-major one). Change:
//   one CTA per share through a padded shared tile, 16-byte row stores, no per-element 64-bit
//   division. Predicted: the frag convert at the row-major convert's cost; frag-dQ 1.02-1.03x TMA-dQ
//   at 4,16,8192,128, 1.00-1.03x at 2048; D = 64's default 1.00-1.02x. Measured (four H200s,
//   2026-11-27, commit 5f47945; `lab check --mode bwd` fp16 and bf16 passed, `v7_dev.py check
//   --tuning` 0 failures, the three sanitizers clean): Nsight Compute at 4,16,4096,128 puts the frag
//   convert at 45.5 us against the row-major convert's 45.9 (both DRAM 83% of peak); `lab tune`:
//   frag-dQ 1.027x TMA-dQ at 4,16,8192,128 (596.2 TFLOP/s) and 1.028x at 2048; at D = 64 the default
//   (frag-dQ) 1.064x TMA-dQ (484.0 TFLOP/s), about 1.017x its step-5 self. All inside the
//   predictions. Taken: frag-dQ the default at D = 128 too (BwdDefault128 is the candidate's type).
//
// Step 6a (v8_notes.md; predicted before any run): dK and dV leave through shared memory
//   (StagedEpilogue<>). Evidence: the kernel split at 32,16,512,128 (torch.profiler CUPTI records,
//   benchmarks/kernel_split.py: v8's preprocess and convert cost what cuDNN's do; the gap is the main
//   kernel, 406.5 against cuDNN's 370.3 us) and the profile's epilogue lines (the accumulator pairs
//   stored straight to global: lg_throttle, half of each sector used). Change: both consumer
//   warpgroups meet at a named barrier after their last products, write dK and dV as 16-bit pairs
//   into a padded row-major tile over the K/V region, meet again, and store the tile with 16-byte
//   stores. Predicted: 1.04-1.14x at 32,16,512,128, 1.01-1.03x at 4,16,4096,128. Measured (four
//   H200s, 2026-11-27, commit 1ade183; `v7_dev.py check --rung v8 --tuning` 0 failures,
//   compute-sanitizer memcheck, racecheck, synccheck clean; `lab tune --mode bwd`, every timed call
//   checked) against the frag-dQ default: 1.124x at 32,16,512,128 fp16 (340.8 TFLOP/s), 1.123x causal,
//   1.095x at 32,32,512,64, 1.027x at 4,16,4096,128, 1.018x at 4,16,8192,128 (611.0 TFLOP/s), 0.997x
//   the frag-dQ candidate at 2,32:8,1000,128 bf16 causal GQA (inside the CI95: level). All inside
//   the predictions. Nsight Compute at 32,16,512,128: the main kernel 349.2 against 414.9 us
//   (1.188x), tensor pipe 49.7% of peak (41.8%), lg_throttle gone from the top stalls (20% before),
//   the uncoalesced-global finding (50% of store sectors excessive) gone; the top stall is now long
//   scoreboard (35%). Taken: StagedEpilogue<> on both defaults (BwdDefault64/128 are the candidates'
//   types); the deterministic mode keeps the TMA-dQ kernels it was checked with (DeterministicOf<>).
//   With it, issue 27's target sweep (fa-grid, four H200s, commit ea49cdd, shipped): v8's backward
//   >= cuDNN in 24 of 24 cells in fp16 and in bf16 under CUDA-graph replay (1.015-1.164x) and under
//   events; v9+v8's forward+backward >= cuDNN's in 24 of 24; on an H100 598-625 TFLOP/s at D = 128,
//   N >= 8192 non-causal (cuDNN 541-564). Still behind cuDNN: causal GQA with few K/V heads
//   (1,32:4,8192,64 causal 0.81x: coarse per-CTA work, v8_notes.md).
//
// Causal GQA split (v8_notes.md "Causal GQA"; host code only: the same kernels, another grid). Under
//   the causal mask key block 0's CTA sees every query block of its group's heads; with few K/V heads
//   one CTA was a whole SM's fair share (1,32:4,8192,64: 512 query steps against 504). The group is
//   now split further, causal only, until the longest CTA holds at most half of that share
//   (bwd_gqa_split.cuh, GqaSplit::kCausalBalance). Predicted (before any run): 1.15-1.30x at
//   1,32:4,8192,64 causal, 1.00-1.06x at 2,32:8,1000,128 causal, 1.00x non-causal. Measured (NVIDIA
//   H100 80GB HBM3, 2026-11-27, commit 3aa75c4; `lab tune --mode bwd --predict`, 30 interleaved rounds,
//   L2 flushed, every output checked; paired CI95): 1.276x (1.273-1.282) at 1,32:4,8192,64 causal fp16
//   (323 -> 412 TFLOP/s), 1.005x (0.994-1.016) at 2,32:8,1000,128 causal bf16, 0.999x at
//   1,32:4,8192,64 non-causal (not split, as designed). Taken: the default's and --deterministic's
//   split since (dK and dV partials still summed in split order; dQ's turn is still the key block's
//   index, whichever CTA runs a query head: the same bits on every run on one GPU); the split before
//   it stays a tuning candidate ("... GQA-fill-SMs"). The plain build's kernels: the same SASS as
//   before (cuobjdump -sass, 88 of 88; nvcc 13.0).
//
// Deterministic dQ (issue 27's deterministic mode): TMA-dQ with each query block's reductions taken
//   in key-block order through a turn counter per 64 query rows (Deterministic<> says how and why it
//   cannot deadlock), so dQ, like dK and dV, has the same bits on every run. Predicted: 0.85-0.95x
//   TMA-dQ at 4,16,8192,128 (a CTA's writer waits for the key block before it on every step; the
//   consumers only when the writer falls a step behind), nearer 1.0x causal (fewer key blocks per
//   query block early). Measured as tuning candidates "... deterministic" (one H200, 2026-11-27,
//   commit 226d993): tests/test_v8_deterministic_gpu.py 5 passed (dQ's bits equal twice on 5
//   shapes), `v7_dev.py check --rung v8 --tuning` passed, compute-sanitizer memcheck, racecheck and
//   synccheck clean; `lab tune --mode bwd` against the TMA-dQ default: 0.953x at 4,16,8192,128 fp16,
//   0.828x at 4,16,2048,128, 0.885x at 4,16,8192,64, 0.831x at 2,32:8,1000,128 bf16 causal GQA
//   (against TMA-dQ, the default then; frag-dQ, the default since, is 1.027-1.064x TMA-dQ, so the
//   deterministic mode's price against today's default is larger: `lab bench --deterministic` times it).
//   Reachable by users since: the rung declares `deterministic = true`, and `--deterministic` on
//   `lab check / bench / sweep / profile --mode bwd` sets args->deterministic (common.cuh's
//   deterministic contract), which lab_backward_v8 turns into BwdDeterministic64/128: the defaults
//   wrapped in Deterministic<> (a frag-dQ default as TmaDq<> of its tiles: the path that was checked
//   and measured; Deterministic<FragDq<>> has never run), the same kernels as the tuning candidates; `lab check --deterministic`
//   also runs each shape's backward twice and requires dQ, dK, dV bitwise equal.
//
// Roles in one backward CTA (384 threads; key block n0 .. n0+127 of head bh):
//
//   warpgroup 0: producer (setmaxnreg.dec 24; one thread issues every copy; TmaDq<>: a second
//     thread, warp 1's, issues dQ's reductions from the consumers' staging buffers)
//     K_j, V_j --TMA--> smem (once; kv_full)
//     for query block m: wait q_empty[s]  -> Q_m  (TMA boxes) + LSE2_m (bulk)  -> q_full[s]
//                        wait do_empty[s] -> dO_m (TMA boxes) + Dsum_m (bulk)  -> do_full[s]
//   warpgroups 1, 2: consumers (setmaxnreg.inc 240), keys n0 + 64c .. +63 (c = warpgroup - 1)
//     S^T  = K_c Q_m^T       wgmma ss m64nBMk16 x D/16   [64 keys x BM queries] fp32
//     dP^T = V_c dO_m^T      wgmma ss m64nBMk16 x D/16
//     P^T  = 2^(S^T scale log2e - LSE2), masked; dS^T = P^T (dP^T - Dsum)
//     dV_c += P^T dO_m       wgmma rs m64nDk16 x BM/16   (A = P^T from registers, B = dO MN-major)
//     dK_c += dS^T Q_m       wgmma rs m64nDk16 x BM/16
//     dS^T -> smem dS[m % 2]; fence.proxy.async; named barrier (both consumer warpgroups)
//     dQ_m (its quarter/half) = dS K_j   wgmma ss m64n64k16 x 8, A = dS^T and B = K both MN-major
//     wait; release the slots; red.global.add.v2.f32 into the fp32 dQ accumulator
//   epilogue: dK * scale and dV to 16 bits, stored from the accumulators.
//
//   Shared memory (1024-byte aligned, 128-byte swizzle: 16-byte chunk c of row r at c ^ (r % 8)):
//   [K: D/64 atoms of 128 rows x 128 B][V: same][Q x2][dO x2: D/64 atoms of BM rows x 128 B]
//   [dS^T x2: BM/64 atoms of 128 key rows x 128 B][LSE2 x2][Dsum x2: BM floats]
//   Tiles per head dim: D=128: BM = 64 query rows per step, dQ split by columns (64 each);
//   D=64: BM = 128, dQ split by rows (64 each). ~162 KB either way: one CTA per SM.
#include "common.cuh"
#include "bwd_gqa_split.cuh"
#include "bwd_prepost.cuh"
#include "hopper/fwd_wgmma.cuh"
#include "hopper/tma_pipeline.cuh"
#include "hopper/wgmma.cuh"

#include <cmath>
#include <type_traits>

namespace v8 {

// The backward's tile configuration: D head dim, BM query rows per step, STAGES slots of the Q/dO
// ring. The key block is fixed at 128 keys (two consumer warpgroups of 64). BULK_DQ: each warp
// stages its dQ rows in shared memory and hands them to the copy engine as bulk reductions
// (cp.reduce.async.bulk .add.f32, one per row), instead of red.global.add.v2.f32 from registers.
template <int D_, int BM_, int STAGES_, bool BULK_DQ_ = false>
struct BwdConfig {
  static constexpr int D = D_, BM = BM_, kStages = STAGES_;
  static constexpr bool kBulkDq = BULK_DQ_;
  static constexpr int BN = 128, kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kHalves = D / 64;            // 64-column swizzle atoms across D
  static constexpr int kKVBytes = BN * D * 2;       // one K or V tile
  static constexpr int kQBytes = BM * D * 2;        // one Q or dO tile
  static constexpr int kDsBytes = BN * BM * 2;      // one dS^T tile
  static constexpr int kStatBytes = BM * 4;         // one block of LSE2 or Dsum
  static constexpr int kOffK = 0, kOffV = kKVBytes, kOffQ = 2 * kKVBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffDS = kOffDO + kStages * kQBytes;
  static constexpr int kOffL = kOffDS + 2 * kDsBytes;
  static constexpr int kOffDsum = kOffL + kStages * kStatBytes;
  // dQ [BM x D] per step, split between the two consumer warpgroups on whole swizzle atoms: by
  // rows when BM = 128 (each m64 x D), else by columns (each m64 x D/2).
  static constexpr bool kDqSplitRows = BM == 128;
  static constexpr int kDqN = kDqSplitRows ? D : D / 2;
  // BULK_DQ's staging tile per consumer warpgroup: 64 rows of kDqN floats, rows 32 bytes apart
  // beyond their length, so that a half-warp's float2 stores (rows g, g+1.. 8 words apart) meet no
  // bank twice; each row is its own bulk reduction (16-byte aligned source and destination).
  static constexpr int kDqRowBytes = kDqN * 4 + 32;
  static constexpr int kOffDQ = kOffDsum + kStages * kStatBytes;
  static constexpr int kDqTileBytes = kBulkDq ? 64 * kDqRowBytes : 0;
  static constexpr int kSmemBytes = kOffDQ + kConsumers * kDqTileBytes + 1024;  // + alignment slack
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // How each consumer warpgroup orders its products (0: the measured step 1; Overlapped<> below).
  static constexpr int kOverlap = 0;
  // TMA-dQ (TmaDq<> below): none here. Its staging boxes are [64 rows x 32 floats] of 128 bytes.
  static constexpr bool kDqTma = false;
  static constexpr bool kDqFrag = false;  // FragDq<> below
  static constexpr bool kDqDet = false;   // Deterministic<> below
  static constexpr bool kStagedEpi = false;  // StagedEpilogue<> below
  static constexpr int kOffDqT = 0, kDqTileTBytes = 0, kDqBoxBytes = 64 * 128;
  // Threads at the dS^T named barrier (barrier 1) of each step: the consumers (TMA-dQ: + the dQ writer's warp).
  static constexpr int kDsBarrierThreads = kConsumerThreads;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BM == 64 || BM == 128, "query block of 64 or 128 rows");
  static_assert(kDqN == 64 || kDqN == 128, "dQ split on whole 64-column atoms");
  static_assert(BM <= lab_bwd::kMaxQueryBlock, "the row statistics are padded to kMaxQueryBlock rows");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};

// Step 3's tuning candidates: the same tiles with the products issued so that more of them are in
// flight (v8_notes.md, step 3). 1: FlashAttention-3's order within a step: dV issued before the
// dS^T stores, dQ before dK, dQ's RED while dK runs. 2: as 1, and the next step's S^T and dP^T
// issued before this step's RED. A config of its own (not a template argument of BwdConfig) so
// that the default kernels keep their names and machine code.
template <class Base, int OVERLAP>
struct Overlapped : Base {
  static constexpr int kOverlap = OVERLAP;
  static_assert(OVERLAP == 1 || OVERLAP == 2, "overlap 1 (FA3's order) or 2 (and the next S^T, dP^T)");
  static_assert(!Base::kBulkDq, "the overlapped orders add dQ by RED from registers");
};

// Step 4's tuning candidates (v8_notes.md, step 4): dQ by TMA tensor reductions, issued by a warp of
// its own. Each consumer warpgroup stores its fp32 dQ share [64 rows x kDqN] into its staging buffer,
// laid out as kDqN/32 boxes of [64 rows x 32 floats] with the 128-byte swizzle of dQ's fp32 tensor
// map (lab_tma_map_3d_f32), and every thread fences the async proxy and arrives on dq_full; warp 1 of
// the producer warpgroup (the dQ writer) waits for it, its first thread issues one
// cp.reduce.async.bulk.tensor per box into the accumulator (rows past nq clipped by the map) and
// waits for the engine's reads, and the warp arrives (bar.arrive) on the next step's dS^T named
// barrier, which the consumers pass before they store dQ again: so no consumer waits on a
// reduction, or on anything but the barrier it already had (FlashAttention-3's dQ-empty barrier is
// such a named barrier too). One buffer per warpgroup: a named barrier counts one arrival per
// generation, so the writer can free at most one step ahead. Layout: the staging buffers after
// dS^T (1024-aligned), the row statistics after them. A config of its own (as Overlapped<>), so the
// default kernels keep their names and machine code.
template <class Base>
struct TmaDq : Base {
  static constexpr bool kDqTma = true;
  static constexpr int kDqTileTBytes = (Base::kDqN / 32) * Base::kDqBoxBytes;  // one warpgroup's share
  static constexpr int kOffDqT = Base::kOffDS + 2 * Base::kDsBytes;
  static constexpr int kOffL = kOffDqT + Base::kConsumers * kDqTileTBytes;
  static constexpr int kOffDsum = kOffL + Base::kStages * Base::kStatBytes;
  static constexpr int kSmemBytes = kOffDsum + Base::kStages * Base::kStatBytes + 1024;  // + alignment slack
  static constexpr int kDsBarrierThreads = Base::kConsumerThreads + 32;
  static_assert(!Base::kBulkDq, "TMA-dQ replaces step 2's per-row bulk reductions");
  static_assert(kOffDqT % 1024 == 0, "the swizzled staging boxes sit on 1024-byte boundaries");
  // The static mbarriers (1 + 4 S + 2 of 8 bytes) count against the same 227 KB.
  static_assert(kSmemBytes + 8 * (1 + 4 * Base::kStages + 2) <= 227 * 1024, "shared memory over the 227 KB per-block limit");
};

// Step 5's tuning candidates (v8_notes.md, step 5; predicted before any run): TMA-dQ's protocol
// (the dQ writer, dq_full, the dS^T barrier) with dQ's fp32 accumulator in the wgmma fragment's own
// order instead of row-major. Step 4's profile: the staging STS.64 into the 128-byte-swizzled boxes
// take four wavefronts where two would do (a 64-bit store is served per half-warp, and there the
// swizzle's XOR and the quad's chunk bit both toggle chunk bit 0), and they and the proxy fence
// after them hold 11.5% of the stall samples. Here thread t of a warpgroup stores its p-th pair of
// accumulators (regs 2p, 2p + 1) as one float2 at slot p * 128 + t of the warpgroup's 16 KB share:
// each half-warp writes 128 contiguous bytes (one wavefront each, the minimum). The writer adds
// the share with one 1-D bulk reduction (cp.reduce.async.bulk .add.f32) into the accumulator laid
// out the same way, [B*H][nq_pad / BM][warpgroup][slot]; a convert of its own
// (bwd_convert_frag_kernel) reads that order back into row-major dQ, and the accumulator, whose
// padding rows this layout writes too, is zeroed whole by the preprocess (its kWhole
// instantiation: the same bytes of zeros as the row-major one's, plus the padding rows).
// FlashAttention-3's SM90 backward keeps its dQ accumulator in the MMA's order the same way (read,
// not copied).
template <class Base>
struct FragDq : TmaDq<Base> {
  static constexpr bool kDqFrag = true;
  static_assert(TmaDq<Base>::kDqTileTBytes == 64 * Base::kDqN * 4, "a warpgroup's share: 64 rows x kDqN fp32");
  static_assert(Base::kDqN / 4 * 128 * 8 == 64 * Base::kDqN * 4, "kDqN / 4 float2 slots per consumer thread");
};

// Deterministic dQ (issue 27's deterministic mode; `--deterministic` and the "... deterministic" tuning
// candidates, measured in the header): the reductions into each query block of the accumulator land in key-block order, so dQ has
// the same bits on every run (dK and dV already do: they live in one CTA's registers, or in GQA's
// split partials summed in order). The dQ writer's first thread waits, before a step's reductions,
// until the query block's turn counter (one int per 64 query rows of each head, after the
// accumulator, zeroed before the main kernel) equals its key block, n_block: every key block below
// it adds into that query block (non-causal: all; causal: a key block's first query block does not
// decrease with it; GQA: one unit's CTAs per query head), so the turn is its index. After the
// reductions it waits for their writes (not only the engine's reads) and releases the counter
// (+1). CTA n waits only on CTA n - 1, which the hardware starts first (blocks in index order, as
// FlashAttention-3's deterministic backward relies on too), so the chain always moves. The
// consumers wait only if the writer is a whole step behind (at the dS^T barrier).
template <class Base>
struct Deterministic : Base {
  static constexpr bool kDqDet = true;
  static_assert(Base::kDqTma, "the turn is taken by the dQ writer of TMA-dQ / frag-dQ");
};

// Step 6 candidate (v8_notes.md; predicted before any run): dK and dV leave through shared memory.
// The step-5 epilogue stores each thread's accumulator pairs straight to global memory: 64 4-byte
// stores a thread, a warp's store 8 rows x 16 bytes (half of each sector), lg_throttle on every one
// (the profile at 4,16,4096,128: 3.3% of the stall samples at 64 query steps a CTA, so some 20% of
// a CTA at N = 512's 8 steps, where v8's main kernel is 1.12x cuDNN's). Here both consumer
// warpgroups meet at a named barrier once their last products are done (K, V, Q and dO are then
// read by nobody), put their dK and dV rows, as 16-bit pairs, into a row-major tile over the K/V
// region (rows padded by 16 bytes: a warp's 8 rows x 4 lanes hit 32 banks), meet again, and write
// the tile out with 16-byte stores, each warp 512 contiguous bytes.
// Measured (the header's step 6a): 1.02-1.12x frag-dQ, sanitized; the default at both head dims.
template <class Base>
struct StagedEpilogue : Base {
  static constexpr bool kStagedEpi = true;
  static constexpr int kEpiRowWords = Base::D / 2 + 4;   // a row of D 16-bit values + 16 bytes
  static_assert(2 * Base::BN * kEpiRowWords * 4 <= Base::kOffDS, "dK's and dV's tiles fit below dS^T");
};

// GQA = true (common.cuh's GQA contract; its own instantiation, so the kernel without it is the
// same machine code as before): grid.y = B*Hkv*kv_splits units; unit u loads K/V head u / kv_splits
// once and runs query heads u*heads_per_cta .. +heads_per_cta-1 one after another through the same
// Q/dO ring, dK and dV summed in registers across them. kv_splits = 1: written as 16 bits; else as
// fp32 partials [unit, nk, D] that bwd_sum_partials_kernel adds in split order.
// The kernel's body: bwd_kernel (every configuration but TMA-dQ's) and bwd_kernel_tdq (TmaDq<>,
// with dQ's fp32 tensor map as one more __grid_constant__ parameter) are this, inlined.
template <class C, typename T, bool CAUSAL, bool GQA>
static __device__ __forceinline__ void
bwd_body(const CUtensorMap& tm_q,   // [B*H, nq, D] in boxes of [BM rows, 64 cols]
         const CUtensorMap& tm_do,  // [B*H, nq, D] in boxes of [BM rows, 64 cols]
         const CUtensorMap& tm_k,   // [B*Hkv, nk, D] in boxes of [BN rows, 64 cols]
         const CUtensorMap& tm_v,   // [B*Hkv, nk, D] in boxes of [BN rows, 64 cols]
         const float* __restrict__ lse2,             // [B*H, nq_pad] LSE * log2(e), +inf on padding rows
         const float* __restrict__ dsum,             // [B*H, nq_pad] rowsum(dO * O), 0 on padding rows
         float* __restrict__ dq_acc,                 // [B*H, nq, D] fp32, zeroed by the preprocess
         T* __restrict__ dk, T* __restrict__ dv,     // [B*Hkv, nk, D]
         int nq, int nk, int nq_pad, float scale_log2, float scale,
         int heads_per_cta, int kv_splits,           // GQA only: query heads per CTA, CTAs per K/V head
         float* __restrict__ dk_part, float* __restrict__ dv_part,  // GQA, kv_splits > 1: [B*Hkv*kv_splits, nk, D]
         const CUtensorMap* tm_dq) {                 // TMA-dQ only: dq_acc in boxes of [64 rows, 32 cols] fp32
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = C::D, BM = C::BM, BN = C::BN, S = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  // Barriers: [0] K/V landed; per stage s: Q full, Q empty, dO full, dO empty; TMA-dQ: per consumer
  // warpgroup, its dQ share staged (dq_full). (A staging buffer is free again at the next step's
  // dS^T named barrier, which the dQ writer's warp arrives on.)
  __shared__ __align__(8) uint64_t bars[1 + 4 * S + (C::kDqTma ? 2 : 0)];

  const int tid = threadIdx.x;
  const int n_block = blockIdx.x, bh = blockIdx.y;
  const int n0 = n_block * BN;
  const int m_blocks = lab_cdiv(nq, BM);
  // Top-left causal (query i sees keys j <= i): query blocks wholly above this key block see none
  // of its keys.
  const int m_first = CAUSAL ? min(n0 / BM, m_blocks) : 0;
  const int n_steps = m_blocks - m_first;
  // GQA: this CTA's K/V head and first query head; its steps are n_steps per query head, head by head.
  const int kv_index = GQA ? bh / kv_splits : bh;
  const int bh_q0 = GQA ? bh * heads_per_cta : bh;
  const int n_total = GQA ? n_steps * heads_per_cta : n_steps;

  const uint32_t s_base = (lab_smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_k = s_base + C::kOffK, s_v = s_base + C::kOffV;
  auto s_q = [&](int s) { return s_base + C::kOffQ + s * C::kQBytes; };
  auto s_do = [&](int s) { return s_base + C::kOffDO + s * C::kQBytes; };
  auto s_ds = [&](int b) { return s_base + C::kOffDS + b * C::kDsBytes; };
  auto s_l = [&](int s) { return s_base + C::kOffL + s * C::kStatBytes; };
  auto s_dd = [&](int s) { return s_base + C::kOffDsum + s * C::kStatBytes; };
  const uint32_t kv_full = lab_smem_addr(&bars[0]);
  auto q_full = [&](int s) { return lab_smem_addr(&bars[1 + s]); };
  auto q_empty = [&](int s) { return lab_smem_addr(&bars[1 + S + s]); };
  auto do_full = [&](int s) { return lab_smem_addr(&bars[1 + 2 * S + s]); };
  auto do_empty = [&](int s) { return lab_smem_addr(&bars[1 + 3 * S + s]); };
  // TMA-dQ: consumer warpgroup cw's staging buffer and its barrier.
  auto s_dqt = [&](int cw) { return s_base + C::kOffDqT + cw * C::kDqTileTBytes; };
  auto dq_full = [&](int cw) { return lab_smem_addr(&bars[1 + 4 * S + cw]); };

  if (tid == 0) {
    lab_mbar_init(kv_full, 1);
    for (int s = 0; s < S; ++s) {
      lab_mbar_init(q_full(s), 1);
      lab_mbar_init(do_full(s), 1);
      lab_mbar_init(q_empty(s), C::kConsumerThreads);
      lab_mbar_init(do_empty(s), C::kConsumerThreads);
    }
    if constexpr (C::kDqTma) {
      for (int cw = 0; cw < C::kConsumers; ++cw) lab_mbar_init(dq_full(cw), 128);  // the warpgroup's threads
    }
    lab_fence_mbar_init();
  }
  __syncthreads();

  const int warpgroup = tid / 128;
  if (warpgroup == 0) {
    // ---------------- producer: one thread issues every copy ----------------
    lab_setmaxnreg_dec<C::kProducerRegs>();
    // No query block sees this key block (causal, nk > nq): nothing to load, dK = dV = 0.
    if (tid == 0 && n_steps > 0) {
      lab_tma_prefetch_map(&tm_q);
      lab_tma_prefetch_map(&tm_do);
      lab_tma_prefetch_map(&tm_k);
      lab_tma_prefetch_map(&tm_v);
      lab_mbar_arrive_expect_tx(kv_full, 2 * C::kKVBytes);
#pragma unroll
      for (int h = 0; h < C::kHalves; ++h) {
        lab_tma_load_3d(s_k + h * BN * 128, &tm_k, kv_full, h * 64, n0, kv_index);
        lab_tma_load_3d(s_v + h * BN * 128, &tm_v, kv_full, h * 64, n0, kv_index);
      }
      const float* lse2_bh = lse2 + (size_t)bh * nq_pad;
      const float* dsum_bh = dsum + (size_t)bh * nq_pad;
      // GQA: step it is query block m_first + mi of query head bq (mi runs to n_steps, then bq moves on).
      auto load_step = [&](int it, int mi, int bq) {
        const int s = it % S, m0 = (m_first + (GQA ? mi : it)) * BM;
        const int bh_q = GQA ? bq : bh;
        const uint32_t parity = ((it / S) & 1) ^ 1;  // first pass: a fresh slot counts as free
        lab_mbar_wait(q_empty(s), parity);
        lab_mbar_arrive_expect_tx(q_full(s), C::kQBytes + C::kStatBytes);
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h) lab_tma_load_3d(s_q(s) + h * BM * 128, &tm_q, q_full(s), h * 64, m0, bh_q);
        lab_bulk_load(s_l(s), GQA ? lse2 + (size_t)bq * nq_pad + m0 : lse2_bh + m0, C::kStatBytes, q_full(s));
        lab_mbar_wait(do_empty(s), parity);
        lab_mbar_arrive_expect_tx(do_full(s), C::kQBytes + C::kStatBytes);
#pragma unroll
        for (int h = 0; h < C::kHalves; ++h)
          lab_tma_load_3d(s_do(s) + h * BM * 128, &tm_do, do_full(s), h * 64, m0, bh_q);
        lab_bulk_load(s_dd(s), GQA ? dsum + (size_t)bq * nq_pad + m0 : dsum_bh + m0, C::kStatBytes, do_full(s));
      };
      if constexpr (C::kDqTma) {
        // Not unrolled: unrolled (as ptxas does by itself, 4 steps) the loop spilled at the
        // producers' 24 registers beside the dQ writer's branch.
#pragma unroll 1
        for (int it = 0, mi = 0, bq = bh_q0; it < n_total; ++it) {
          load_step(it, mi, bq);
          if constexpr (GQA) {
            if (++mi == n_steps) mi = 0, ++bq;
          }
        }
      } else {
        for (int it = 0, mi = 0, bq = bh_q0; it < n_total; ++it) {
          load_step(it, mi, bq);
          if constexpr (GQA) {
            if (++mi == n_steps) mi = 0, ++bq;
          }
        }
      }
    } else if (C::kDqTma && tid / 32 == 1 && n_steps > 0) {
      // ---------------- dQ writer (TMA-dQ): warp 1; its first thread issues every dQ reduction ----------------
      // (an else of the loader: values it alone needs are not held across the loader's loop, which
      // at the producers' 24 registers spilled)
      if constexpr (C::kDqTma) {
        const bool leader = tid == 32;
        // Deterministic: the turn counters after the accumulator's B*H*nq_pad*D floats (B*H =
        // gridDim.y * heads_per_cta, GQA or not; lab_bwd::workspace_bytes sizes them).
        int* const turns = C::kDqDet ? reinterpret_cast<int*>(dq_acc + (size_t)gridDim.y * heads_per_cta * nq_pad * D)
                                     : nullptr;
        if (leader) lab_tma_prefetch_map(tm_dq);
        __syncwarp();                               // the whole warp at each bar.arrive
        lab_named_arrive(1, C::kDsBarrierThreads);  // step 0: the staging buffers are free
#pragma unroll 1
        for (int it = 0, mi = 0, bq = bh_q0; it < n_total; ++it) {
          const int m0 = (m_first + (GQA ? mi : it)) * BM;
          const int bh_q = GQA ? bq : bh;
          if constexpr (C::kDqDet) {   // this query block's turn: every lower key block has added
            if (leader) {
              const int* turn = turns + (size_t)bh_q * (nq_pad / 64) + m0 / 64;
              while (lab_ld_acquire_gpu(turn) != n_block) __nanosleep(64);
              lab_fence_proxy_async_global();   // the wait before this proxy's reductions
            }
          }
#pragma unroll
          for (int cw = 0; cw < C::kConsumers; ++cw) {
            lab_mbar_wait(dq_full(cw), it & 1);
            const int row = m0 + (C::kDqSplitRows ? 64 * cw : 0), col = C::kDqSplitRows ? 0 : cw * C::kDqN;
            if (leader) {
              if constexpr (C::kDqFrag) {   // the share as one 1-D bulk reduction, in the fragment's order
                const size_t share = ((size_t)bh_q * (nq_pad / BM) + m0 / BM) * C::kConsumers + cw;
                lab_bulk_reduce_add_f32(dq_acc + share * (C::kDqTileTBytes / 4), s_dqt(cw), C::kDqTileTBytes);
              } else {
#pragma unroll
                for (int a = 0; a < C::kDqN / 32; ++a)
                  lab_tma_reduce_add_3d(tm_dq, s_dqt(cw) + a * C::kDqBoxBytes, col + 32 * a, row, bh_q);
              }
              lab_bulk_commit();
            }
          }
          if (leader) lab_bulk_wait_read<0>();  // the engine has read both buffers
          __syncwarp();
          // Step it + 1's dS^T barrier: the consumers pass it before they store dQ again.
          if (it + 1 < n_total) lab_named_arrive(1, C::kDsBarrierThreads);
          if constexpr (C::kDqDet) {   // the writes landed, then the next key block's turn
            if (leader) {
              lab_bulk_wait<0>();
              lab_fence_proxy_async_global();
              lab_red_release_gpu_add(turns + (size_t)bh_q * (nq_pad / 64) + m0 / 64, 1);
            }
          }
          if constexpr (GQA) {
            if (++mi == n_steps) mi = 0, ++bq;
          }
        }
        if (leader) lab_bulk_wait<0>();  // the reductions' writes done before the CTA ends
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  lab_setmaxnreg_inc<C::kConsumerRegs>();
  const int c = warpgroup - 1;                       // keys n0 + 64c .. +63
  const int lane = tid & 31, warp = (tid / 32) & 3;  // warp within the warpgroup: rows 16 warp ..
  const int g = lane >> 2, c2 = 2 * (lane & 3);      // accumulator row g (and g + 8), column pair c2
  const int key_g = n0 + c * 64 + warp * 16 + g;     // this thread's keys: key_g, key_g + 8

  float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk_acc[i] = dv_acc[i] = 0.f;

  // dQ's share of this warpgroup: query rows dq_row0 .. +63 of the block, columns dq_col0 .. +kDqN-1.
  const int dq_row0 = C::kDqSplitRows ? 64 * c : 0;
  const int dq_col0 = C::kDqSplitRows ? 0 : c * C::kDqN;

  // TMA-dQ: this warpgroup's dQ share of step it -> its staging buffer, swizzled as the fp32 map's
  // boxes: the thread's float2 of row r (= 16 warp + g + 8h, so r % 8 = g), column j (= 8i + c2)
  // sits in box j / 32, 16-byte chunk (j % 32) / 4 XOR g. A warp's store of 8 rows x 32 bytes takes
  // four wavefronts, not two (measured; tests/test_v8_dq_staging.py says why); FragDq<> stores in
  // the fragment's order instead, 16 contiguous bytes per thread. The buffer is free: this step's dS^T barrier,
  // passed before, counted the dQ writer's arrival after the engine read last step's. Then every
  // thread fences the async proxy (its stores, visible to the engine's reads) and arrives (every
  // thread: a per-warp arrival after __syncwarp cost the GQA kernels a spill at 240 registers).
  auto dq_stage = [&](int it, const float (&dq)[C::kDqN / 2]) {
    if constexpr (C::kDqFrag) {
      // Slot p * 128 + t (t: the thread within its warpgroup) holds accumulators 2p, 2p + 1: a
      // half-warp's float2 stores are 128 contiguous bytes, one wavefront. (float4 slots, a
      // quarter-warp's 128 bytes, spilled 4 bytes in the GQA kernels at 240 registers: an STS.128
      // wants its four registers as an aligned quad.)
      uint8_t* share = smem_raw + (s_dqt(c) - lab_smem_addr(smem_raw)) + (warp * 32 + lane) * 8;
#pragma unroll
      for (int p = 0; p < C::kDqN / 4; ++p)
        *reinterpret_cast<float2*>(share + p * 128 * 8) = make_float2(dq[2 * p], dq[2 * p + 1]);
    } else {
      // Chunk (2(i % 4) + c2 / 4) ^ g = 2(i % 4) ^ x with x = (c2 / 4) ^ g: four addresses, one per
      // i % 4. x is made opaque here so that ptxas forms them per step instead of holding them across
      // the loop (it spilled at the consumers' 240 registers when it did).
      uint32_t x = (c2 >> 2) ^ g;
      asm volatile("" : "+r"(x));
      uint8_t* rows = smem_raw + (s_dqt(c) - lab_smem_addr(smem_raw)) + (warp * 16 + g) * 128 + (c2 & 3) * 4;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < C::kDqN / 8; ++i) {
          const uint32_t off = (i / 4) * C::kDqBoxBytes + h * 8 * 128 + (((2 * (i % 4)) ^ x) << 4);
          *reinterpret_cast<float2*>(rows + off) = make_float2(dq[i * 4 + 2 * h], dq[i * 4 + 2 * h + 1]);
        }
    }
    lab_fence_proxy_async_shared();
    lab_mbar_arrive(dq_full(c));
  };

  if (n_steps > 0) lab_mbar_wait(kv_full, 0);
  if constexpr (C::kOverlap > 0) {
    // Step 3's orders (v8_notes.md): the same products, issued so that more are in flight. Which
    // wait protects what:
    //   st, dpt   written by S^T / dP^T (one commit group each); read only after wait<1> / wait<0>.
    //   p_frag    dV's A operand: not touched until the wait<1> that retires dV (with dQ).
    //   ds_frag   dK's A operand (and the dS^T stores' source, read before dK is issued; a
    //             wgmma.fence orders those reads before dK): not touched until dK's wait<0>.
    //   dO_s      read by dP^T and dV (and Dsum_s by this thread): do_empty after dV's wait<1>.
    //   Q_s       read by S^T and dK (and LSE2_s): q_empty after dK's wait<0>.
    //   dS^T[b]   written at step it (b = it % 2), read by both warpgroups' dQ of step it, which
    //             each retires (wait<1>) before it reaches step it + 1's named barrier; step it + 2
    //             writes b again only after that barrier, as in the default order.
    //   S^T of step it + 1 (order 2): issued after that step's q_full wait into st, whose step-it
    //             values were consumed by the packing (registers only), behind dK: the wait<1>
    //             that retires dK leaves it in flight (the most recent group), the top of the next
    //             step issues dP^T and waits <1> for S^T as order 1 does.
    float st[BM / 2], dpt[BM / 2];
    auto issue_s = [&](int s, uint32_t phase) {
      lab_mbar_wait(q_full(s), phase);
      lab_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = s_k + (kk / 4) * BN * 128 + c * 64 * 128 + (kk % 4) * 32;
        const uint32_t b = s_q(s) + (kk / 4) * BM * 128 + (kk % 4) * 32;
        lab_wgmma_ss<T, BM>(st, lab_wgmma_desc_sw128(a, 16, 1024), lab_wgmma_desc_sw128(b, 16, 1024), kk > 0 ? 1 : 0);
      }
      lab_wgmma_commit();
    };
    auto issue_dp = [&](int s, uint32_t phase) {
      lab_mbar_wait(do_full(s), phase);
      lab_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = s_v + (kk / 4) * BN * 128 + c * 64 * 128 + (kk % 4) * 32;
        const uint32_t b = s_do(s) + (kk / 4) * BM * 128 + (kk % 4) * 32;
        lab_wgmma_ss<T, BM>(dpt, lab_wgmma_desc_sw128(a, 16, 1024), lab_wgmma_desc_sw128(b, 16, 1024), kk > 0 ? 1 : 0);
      }
      lab_wgmma_commit();
    };
    // One step; has_next (order 2, known at compile time): the next step's S^T goes out inside it.
    // The last step is its own copy (has_next false), so that no wgmma is issued under a runtime
    // condition: ptxas serialises every wgmma of a function where it cannot follow one's pipeline.
    int mi = 0, bq = bh_q0;
    auto step = [&](int it, auto has_next) {
      constexpr bool next = decltype(has_next)::value;
      const int s = it % S, m0 = (m_first + (GQA ? mi : it)) * BM;
      [[maybe_unused]] const int bh_q = GQA ? bq : bh;  // (TMA-dQ: the dQ writer's business)
      const int ds_buf = it & 1;
      if constexpr (C::kOverlap == 1) issue_s(s, (it / S) & 1);
      issue_dp(s, (it / S) & 1);

      // P^T (as the default order: LSE-normalised exponentials, masked), while dP^T runs.
      lab_wgmma_wait<1>();
      lab_fence_regs(st);
      const float* lse_s = reinterpret_cast<const float*>(smem_raw + (s_l(s) - lab_smem_addr(smem_raw)));
      const float* dd_s = reinterpret_cast<const float*>(smem_raw + (s_dd(s) - lab_smem_addr(smem_raw)));
      const bool masked = n0 + BN > nk || (CAUSAL && m0 < n0 + BN - 1);
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) {
        const float2 l = *reinterpret_cast<const float2*>(lse_s + i * 8 + c2);
#pragma unroll
        for (int e = 0; e < 4; ++e) st[i * 4 + e] = lab_exp2(fmaf(st[i * 4 + e], scale_log2, -((e & 1) ? l.y : l.x)));
      }
      if (masked) {
#pragma unroll
        for (int i = 0; i < BM / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key_g + (e >> 1) * 8, query = m0 + i * 8 + c2 + (e & 1);
            if (key >= nk || (CAUSAL && key > query)) st[i * 4 + e] = 0.f;
          }
      }
      lab_wgmma_wait<0>();
      lab_fence_regs(dpt);
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) {
        const float2 dd = *reinterpret_cast<const float2*>(dd_s + i * 8 + c2);
#pragma unroll
        for (int e = 0; e < 4; ++e) dpt[i * 4 + e] = st[i * 4 + e] * (dpt[i * 4 + e] - ((e & 1) ? dd.y : dd.x));
      }
      uint32_t p_frag[BM / 16][4], ds_frag[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          p_frag[kk][r] = lab_pack2<T>(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
          ds_frag[kk][r] = lab_pack2<T>(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
        }

      // dV += P^T dO first: its products run while this warpgroup stores dS^T.
      lab_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        lab_wgmma_rs_tb<T, D>(dv_acc, p_frag[kk], lab_wgmma_desc_sw128(s_do(s) + kk * 2048, BM * 128, 1024));
      lab_wgmma_commit();
      {
        uint8_t* ds_tile = smem_raw + (s_ds(ds_buf) - lab_smem_addr(smem_raw));
        const int row = c * 64 + warp * 16 + g;
#pragma unroll
        for (int i = 0; i < BM / 8; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row + 8 * h;
            const int off = (i / 8) * BN * 128 + r * 128 + (((i % 8) ^ g) * 16) + (lane & 3) * 4;
            *reinterpret_cast<uint32_t*>(ds_tile + off) = ds_frag[i / 2][(i % 2) * 2 + h];
          }
      }
      lab_fence_proxy_async_shared();            // the stores above, visible to wgmma's reads
      lab_named_sync(1, C::kDsBarrierThreads);   // both warpgroups' keys of dS^T are in place

      // dQ, then dK (FlashAttention-3's order): dQ retires first, its RED runs while dK does.
      float dq[C::kDqN / 2];
      lab_wgmma_fence();                         // ds_frag was read by the stores above
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint32_t a = s_ds(ds_buf) + (dq_row0 / 64) * BN * 128 + kk * 2048;
        const uint32_t b = s_k + (dq_col0 / 64) * BN * 128 + kk * 2048;
        lab_wgmma_ss_tt<T, C::kDqN>(dq, lab_wgmma_desc_sw128(a, BN * 128, 1024),
                                    lab_wgmma_desc_sw128(b, BN * 128, 1024), kk > 0 ? 1 : 0);
      }
      lab_wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        lab_wgmma_rs_tb<T, D>(dk_acc, ds_frag[kk], lab_wgmma_desc_sw128(s_q(s) + kk * 2048, BM * 128, 1024));
      lab_wgmma_commit();
      lab_wgmma_wait<1>();                       // dV and dQ retired; dK may still run
      lab_fence_regs(dv_acc);
      lab_fence_regs(dq);
      lab_fence_regs(p_frag);
      lab_mbar_arrive(do_empty(s));              // dO_s and Dsum_s: read for the last time
      // Order 2: the next step's S^T goes out behind dK (dP^T waits for the loop's top: its
      // accumulators beside S^T's, dQ's, dK's and dV's would pass 240 registers).
      if constexpr (next) issue_s((it + 1) % S, ((it + 1) / S) & 1);
      if constexpr (C::kDqTma) {
        dq_stage(it, dq);                        // TMA-dQ: the dQ writer adds it
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int qrow = m0 + dq_row0 + warp * 16 + g + 8 * h;
          if (qrow < nq) {
            float* dst = dq_acc + ((size_t)bh_q * nq + qrow) * D + dq_col0 + c2;
#pragma unroll
            for (int i = 0; i < C::kDqN / 8; ++i) lab_bwd::red_add2(dst + i * 8, dq[i * 4 + 2 * h], dq[i * 4 + 2 * h + 1]);
          }
        }
      }
      // dK retired (with order 2, the next S^T may still run: it is the most recent group).
      if constexpr (next) lab_wgmma_wait<1>();
      else lab_wgmma_wait<0>();
      lab_fence_regs(dk_acc);
      lab_fence_regs(ds_frag);
      lab_mbar_arrive(q_empty(s));               // Q_s and LSE2_s: read for the last time
      if constexpr (GQA) {
        if (++mi == n_steps) mi = 0, ++bq;
      }
    };
    if constexpr (C::kOverlap == 2) {
      if (n_total > 0) {
        issue_s(0, 0);
        for (int it = 0; it + 1 < n_total; ++it) step(it, std::true_type{});
        step(n_total - 1, std::false_type{});
      }
    } else {
      for (int it = 0; it < n_total; ++it) step(it, std::false_type{});
    }
  } else {
    for (int it = 0, mi = 0, bq = bh_q0; it < n_total; ++it) {
      const int s = it % S, m0 = (m_first + (GQA ? mi : it)) * BM;
      const int bh_q = GQA ? bq : bh;   // the query head of this step (GQA: the group's heads in turn)
      const uint32_t phase = (it / S) & 1;
      const int ds_buf = it & 1;

      // S^T = K_c Q^T and dP^T = V_c dO^T: A = 64 rows of K (V) K-major, B = the BM rows of Q (dO)
      // K-major; 8-row groups 1024 B apart, a k16 step +32 B inside a 64-column atom.
      float st[BM / 2], dpt[BM / 2];
      lab_mbar_wait(q_full(s), phase);
      lab_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = s_k + (kk / 4) * BN * 128 + c * 64 * 128 + (kk % 4) * 32;
        const uint32_t b = s_q(s) + (kk / 4) * BM * 128 + (kk % 4) * 32;
        lab_wgmma_ss<T, BM>(st, lab_wgmma_desc_sw128(a, 16, 1024), lab_wgmma_desc_sw128(b, 16, 1024), kk > 0 ? 1 : 0);
      }
      lab_wgmma_commit();
      lab_mbar_wait(do_full(s), phase);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = s_v + (kk / 4) * BN * 128 + c * 64 * 128 + (kk % 4) * 32;
        const uint32_t b = s_do(s) + (kk / 4) * BM * 128 + (kk % 4) * 32;
        lab_wgmma_ss<T, BM>(dpt, lab_wgmma_desc_sw128(a, 16, 1024), lab_wgmma_desc_sw128(b, 16, 1024), kk > 0 ? 1 : 0);
      }
      lab_wgmma_commit();

      // P^T = 2^(s scale log2e - LSE2) from the forward's LSE (no running max: the LSE normalises),
      // zero where the key is padding or, causal, right of the query. Element e of column block i:
      // key key_g + 8 (e >> 1), query m0 + 8 i + c2 + (e & 1). Padding queries have LSE2 = +inf.
      lab_wgmma_wait<1>();
      lab_fence_regs(st);
      const float* lse_s = reinterpret_cast<const float*>(smem_raw + (s_l(s) - lab_smem_addr(smem_raw)));
      const float* dd_s = reinterpret_cast<const float*>(smem_raw + (s_dd(s) - lab_smem_addr(smem_raw)));
      const bool masked = n0 + BN > nk || (CAUSAL && m0 < n0 + BN - 1);
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) {
        const float2 l = *reinterpret_cast<const float2*>(lse_s + i * 8 + c2);
#pragma unroll
        for (int e = 0; e < 4; ++e) st[i * 4 + e] = lab_exp2(fmaf(st[i * 4 + e], scale_log2, -((e & 1) ? l.y : l.x)));
      }
      if (masked) {
#pragma unroll
        for (int i = 0; i < BM / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key_g + (e >> 1) * 8, query = m0 + i * 8 + c2 + (e & 1);
            if (key >= nk || (CAUSAL && key > query)) st[i * 4 + e] = 0.f;
          }
      }
      lab_wgmma_wait<0>();
      lab_fence_regs(dpt);
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) {
        const float2 dd = *reinterpret_cast<const float2*>(dd_s + i * 8 + c2);
#pragma unroll
        for (int e = 0; e < 4; ++e) dpt[i * 4 + e] = st[i * 4 + e] * (dpt[i * 4 + e] - ((e & 1) ? dd.y : dd.x));
      }
      // P^T and dS^T as wgmma's register A operand (the mma.sync m16n8k16 A fragment of rows 16 warp..):
      // k-step kk covers queries 16 kk .. 16 kk + 15, column blocks 2 kk and 2 kk + 1.
      uint32_t p_frag[BM / 16][4], ds_frag[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          p_frag[kk][r] = lab_pack2<T>(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
          ds_frag[kk][r] = lab_pack2<T>(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
        }

      // dV += P^T dO, dK += dS^T Q: B = dO (Q) [BM queries x D] MN-major, 64-column atoms BM*128 B
      // apart, a k16 step (16 queries) +2048 B.
      lab_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        lab_wgmma_rs_tb<T, D>(dv_acc, p_frag[kk], lab_wgmma_desc_sw128(s_do(s) + kk * 2048, BM * 128, 1024));
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        lab_wgmma_rs_tb<T, D>(dk_acc, ds_frag[kk], lab_wgmma_desc_sw128(s_q(s) + kk * 2048, BM * 128, 1024));
      lab_wgmma_commit();

      // dS^T -> shared memory [128 keys x BM queries], queries contiguous in 64-query atoms: row
      // key - n0, chunk (query % 64) / 8 swizzled by the row (g: every row base is a multiple of 8).
      // A quad writes 16 contiguous bytes of a chunk; the swizzle spreads the 8 rows over all banks.
      {
        uint8_t* ds_tile = smem_raw + (s_ds(ds_buf) - lab_smem_addr(smem_raw));
        const int row = c * 64 + warp * 16 + g;
#pragma unroll
        for (int i = 0; i < BM / 8; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row + 8 * h;
            const int off = (i / 8) * BN * 128 + r * 128 + (((i % 8) ^ g) * 16) + (lane & 3) * 4;
            *reinterpret_cast<uint32_t*>(ds_tile + off) = ds_frag[i / 2][(i % 2) * 2 + h];
          }
      }
      lab_fence_proxy_async_shared();            // the stores above, visible to wgmma's reads
      lab_named_sync(1, C::kDsBarrierThreads);   // both warpgroups' keys of dS^T are in place

      // dQ (this warpgroup's share) = dS K: A = dS [queries x keys] read from dS^T (MN-major: the
      // queries contiguous), B = K [keys x D] MN-major; k = the 128 keys, a k16 step +2048 B in both.
      float dq[C::kDqN / 2];
      lab_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint32_t a = s_ds(ds_buf) + (dq_row0 / 64) * BN * 128 + kk * 2048;
        const uint32_t b = s_k + (dq_col0 / 64) * BN * 128 + kk * 2048;
        lab_wgmma_ss_tt<T, C::kDqN>(dq, lab_wgmma_desc_sw128(a, BN * 128, 1024), lab_wgmma_desc_sw128(b, BN * 128, 1024),
                                    kk > 0 ? 1 : 0);
      }
      lab_wgmma_commit();
      lab_wgmma_wait<0>();
      lab_fence_regs(dv_acc);
      lab_fence_regs(dk_acc);
      lab_fence_regs(dq);
      lab_fence_regs(p_frag);
      lab_fence_regs(ds_frag);
      // Q, dO and their statistics are no longer read by this thread (dS^T's buffer is reused two
      // steps on, after the next step's barrier: both warpgroups have finished this step's dQ then).
      lab_mbar_arrive(q_empty(s));
      lab_mbar_arrive(do_empty(s));

      // Into the fp32 accumulator: the other key blocks' CTAs add into the same rows.
      if constexpr (C::kBulkDq) {
        // This warp's 16 rows -> its rows of the staging tile -> 16 bulk reductions (lanes 0-15, one
        // row each). The copy engine must have read last step's rows before they are overwritten.
        const uint32_t s_rows = s_base + C::kOffDQ + c * C::kDqTileBytes + warp * 16 * C::kDqRowBytes;
        uint8_t* rows = smem_raw + (s_rows - lab_smem_addr(smem_raw));
        if (lane < 16) lab_bulk_wait_read<0>();
        __syncwarp();
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < C::kDqN / 8; ++i)
            *reinterpret_cast<float2*>(rows + (g + 8 * h) * C::kDqRowBytes + (i * 8 + c2) * 4) =
                make_float2(dq[i * 4 + 2 * h], dq[i * 4 + 2 * h + 1]);
        lab_fence_proxy_async_shared();  // the stores above, visible to the copy engine's reads
        __syncwarp();
        if (lane < 16) {
          const int qrow = m0 + dq_row0 + warp * 16 + lane;
          if (qrow < nq)
            lab_bulk_reduce_add_f32(dq_acc + ((size_t)bh_q * nq + qrow) * D + dq_col0, s_rows + lane * C::kDqRowBytes,
                                    C::kDqN * 4);
          lab_bulk_commit();
        }
      } else if constexpr (C::kDqTma) {
        dq_stage(it, dq);  // TMA-dQ: the dQ writer adds it
      } else {
        // RED from registers (no return value), two floats each.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int qrow = m0 + dq_row0 + warp * 16 + g + 8 * h;
          if (qrow < nq) {
            float* dst = dq_acc + ((size_t)bh_q * nq + qrow) * D + dq_col0 + c2;
#pragma unroll
            for (int i = 0; i < C::kDqN / 8; ++i) lab_bwd::red_add2(dst + i * 8, dq[i * 4 + 2 * h], dq[i * 4 + 2 * h + 1]);
          }
        }
      }
      if constexpr (GQA) {
        if (++mi == n_steps) mi = 0, ++bq;
      }
    }
  }
  // Bulk reductions still in flight finish before the CTA does.
  if constexpr (C::kBulkDq) {
    if (lane < 16) lab_bulk_wait<0>();
  }

  // Epilogue: dK = scale * dS^T Q summed, dV; rows past nk are not written. GQA split over
  // kv_splits CTAs: this CTA's fp32 share, added to the others' by bwd_sum_partials_kernel.
  if constexpr (GQA) {
    if (kv_splits > 1) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key_g + 8 * h;
        if (key < nk) {
          const size_t off = ((size_t)bh * nk + key) * D + c2;
#pragma unroll
          for (int i = 0; i < D / 8; ++i) {
            *reinterpret_cast<float2*>(dk_part + off + i * 8) =
                make_float2(dk_acc[i * 4 + 2 * h] * scale, dk_acc[i * 4 + 2 * h + 1] * scale);
            *reinterpret_cast<float2*>(dv_part + off + i * 8) = make_float2(dv_acc[i * 4 + 2 * h], dv_acc[i * 4 + 2 * h + 1]);
          }
        }
      }
      return;
    }
  }
  if constexpr (C::kStagedEpi) {   // StagedEpilogue<>: through a shared tile, 16-byte stores
    constexpr int kW = C::kEpiRowWords, kChunks = D / 8;
    // Both warpgroups' products are done (each waited its last): no one reads K, V, Q or dO again,
    // and the producer issued nothing after the last step's loads, which the consumers waited for.
    lab_named_sync(2, C::kConsumerThreads);
    uint32_t* tile = reinterpret_cast<uint32_t*>(smem_raw + (s_base - lab_smem_addr(smem_raw)));
    const int r0 = key_g - n0;   // this thread's tile rows: r0, r0 + 8
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        const int w = (r0 + 8 * h) * kW + 4 * i + (lane & 3);
        tile[w] = lab_pack2<T>(dk_acc[i * 4 + 2 * h] * scale, dk_acc[i * 4 + 2 * h + 1] * scale);
        tile[BN * kW + w] = lab_pack2<T>(dv_acc[i * 4 + 2 * h], dv_acc[i * 4 + 2 * h + 1]);
      }
    }
    lab_named_sync(2, C::kConsumerThreads);
    const int t = tid - 128;   // the consumer's index, 0 .. 255
#pragma unroll
    for (int j = 0; j < BN * kChunks / C::kConsumerThreads; ++j) {
      const int e = j * C::kConsumerThreads + t, r = e / kChunks, ch = e % kChunks;
      if (n0 + r < nk) {
        const size_t off = ((size_t)kv_index * nk + n0 + r) * D + 8 * ch;
        *reinterpret_cast<uint4*>(dk + off) = *reinterpret_cast<const uint4*>(tile + r * kW + 4 * ch);
        *reinterpret_cast<uint4*>(dv + off) = *reinterpret_cast<const uint4*>(tile + (BN + r) * kW + 4 * ch);
      }
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = key_g + 8 * h;
      if (key < nk) {
        const size_t off = ((size_t)kv_index * nk + key) * D + c2;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          *reinterpret_cast<uint32_t*>(dk + off + i * 8) = lab_pack2<T>(dk_acc[i * 4 + 2 * h] * scale, dk_acc[i * 4 + 2 * h + 1] * scale);
          *reinterpret_cast<uint32_t*>(dv + off + i * 8) = lab_pack2<T>(dv_acc[i * 4 + 2 * h], dv_acc[i * 4 + 2 * h + 1]);
        }
      }
    }
  }
#else
  // Built for another target: the launcher refuses before launching (wgmma/TMA need sm_90a).
  __trap();
#endif
}

template <class C, typename T, bool CAUSAL, bool GQA = false>
__global__ void __launch_bounds__(C::kThreads, 1)
bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
           const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
           const float* __restrict__ lse2, const float* __restrict__ dsum, float* __restrict__ dq_acc,
           T* __restrict__ dk, T* __restrict__ dv, int nq, int nk, int nq_pad, float scale_log2, float scale,
           int heads_per_cta, int kv_splits, float* __restrict__ dk_part, float* __restrict__ dv_part) {
  static_assert(!C::kDqTma, "TMA-dQ configurations run bwd_kernel_tdq");
  bwd_body<C, T, CAUSAL, GQA>(tm_q, tm_do, tm_k, tm_v, lse2, dsum, dq_acc, dk, dv, nq, nk, nq_pad, scale_log2, scale,
                              heads_per_cta, kv_splits, dk_part, dv_part, nullptr);
}
template <class C, typename T, bool CAUSAL, bool GQA = false>
__global__ void __launch_bounds__(C::kThreads, 1)
bwd_kernel_tdq(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
               const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
               const float* __restrict__ lse2, const float* __restrict__ dsum, float* __restrict__ dq_acc,
               T* __restrict__ dk, T* __restrict__ dv, int nq, int nk, int nq_pad, float scale_log2, float scale,
               int heads_per_cta, int kv_splits, float* __restrict__ dk_part, float* __restrict__ dv_part,
               const __grid_constant__ CUtensorMap tm_dq) {
  static_assert(C::kDqTma, "only TMA-dQ configurations take dQ's tensor map");
  bwd_body<C, T, CAUSAL, GQA>(tm_q, tm_do, tm_k, tm_v, lse2, dsum, dq_acc, dk, dv, nq, nk, nq_pad, scale_log2, scale,
                              heads_per_cta, kv_splits, dk_part, dv_part, &tm_dq);
}

// GQA: how many CTAs share one K/V head's group of query heads: bwd_gqa_split.cuh's gqa_splits (the
// rule and its history there; kCausalBalance the default since 2026-11-27, kFillSms a tuning
// candidate). Here only the SM count it is asked with, and the workspace its partials need.
using lab_bwd::GqaSplit;
using lab_bwd::kGqaKeyBlock;
static int sm_count() {
  static int sms_by_device[64] = {};  // the SM count, asked once per device
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64) {
    if (sms_by_device[dev] == 0) cudaDeviceGetAttribute(&sms_by_device[dev], cudaDevAttrMultiProcessorCount, dev);
    if (sms_by_device[dev] > 0) sms = sms_by_device[dev];
  }
  return sms;
}
// One fp32 partial buffer (dK's or dV's): [B*Hkv*splits, nk, D]; none without a split.
static size_t gqa_partial_bytes(const LabBackwardArgs* a, int splits) {
  if (splits <= 1) return 0;
  return lab_bwd::align256((size_t)a->batch * a->heads_kv * splits * a->seqlen_k * a->head_dim * sizeof(float));
}

// FragDq<>'s convert: dQ = scale * the accumulator laid out in the fragment's order
// ([B*H][nq_pad / BM][warpgroup][slot p * 128 + t], each slot a float2: accumulators 2p, 2p + 1 of
// thread t, i.e. i = p / 2, h = p % 2), one slot per step: row 16 w + g + 8h, columns 8i + c2 and
// + 1 of the warpgroup's share (w = t / 32, g = lane / 4, c2 = 2 (lane % 4)). Rows past nq (the
// padding of the last query block) are skipped.
// One CTA per share (64 rows x kDqN): its float2 slots read in order (coalesced), each pair of
// fp16/bf16 put at its row and column in a shared tile, then the tile's rows written with 16-byte
// stores. Step 5's first convert (one slot per thread, its row and column decoded with 64-bit
// divisions by runtime values, 4-byte stores: half of each written sector) cost about three times
// the row-major convert and took back the main kernel's gain at D = 128 (v8_notes.md, step 5b).
// The tile's rows are padded by 4 words so a warp's pair stores (8 rows x 4 lanes) hit 32 banks.
template <class C, typename T>
__global__ void __launch_bounds__(256)
bwd_convert_frag_kernel(const float* __restrict__ acc, T* __restrict__ dq, int nq, int m_blocks, size_t shares, float scale) {
  constexpr int D = C::D, kN = C::kDqN, kWords = kN / 2 + 4, kSlots = 64 * kN / 2;
  static_assert(C::kDqTileTBytes == kSlots * 8, "a share: 64 rows x kDqN fp32 in float2 slots");
  static_assert(kSlots % 256 == 0 && (kWords * 4) % 16 == 0, "whole steps; 16-byte aligned tile rows");
  __shared__ __align__(16) uint32_t tile[64 * kWords];
  const int tid = threadIdx.x;
  for (size_t share = blockIdx.x; share < shares; share += gridDim.x) {
    const int cw = (int)(share % C::kConsumers);
    const size_t block = share / C::kConsumers;
    const int mb = (int)(block % m_blocks);
    const size_t bh = block / m_blocks;
    const float2* src = reinterpret_cast<const float2*>(acc) + share * kSlots;
    __syncthreads();   // the previous share's rows have been read out of the tile
#pragma unroll
    for (int j = 0; j < kSlots / 256; ++j) {
      const int p = 2 * j + (tid >> 7), t = tid & 127, lane = t & 31;
      const int r = 16 * (t >> 5) + (lane >> 2) + 8 * (p & 1);
      const int word = 4 * (p >> 1) + (lane & 3);   // column 8 (p / 2) + 2 (lane % 4), in pairs
      const float2 v = src[j * 256 + tid];
      tile[r * kWords + word] = lab_pack2<T>(v.x * scale, v.y * scale);
    }
    __syncthreads();
    const int row0 = mb * C::BM + (C::kDqSplitRows ? 64 * cw : 0);
    const int col0 = C::kDqSplitRows ? 0 : cw * kN;
#pragma unroll
    for (int j = 0; j < 64 * kN / 8 / 256; ++j) {   // 8 elements (16 bytes) per thread per step
      const int e = j * 256 + tid, r = e / (kN / 8), c8 = e % (kN / 8);
      if (row0 + r < nq)
        *reinterpret_cast<uint4*>(dq + ((bh * nq + row0 + r) * D + col0 + 8 * c8)) =
            *reinterpret_cast<const uint4*>(&tile[r * kWords + 4 * c8]);
    }
  }
}

template <class C, typename T, bool CAUSAL, GqaSplit SPLIT = lab_bwd::kGqaSplitDefault>
const char* bwd_launch_one(const LabBackwardArgs* a, cudaStream_t stream) {
  lab_bwd::Workspace w;
  const size_t need = lab_bwd::workspace_bytes(a, &w);
  if (a->workspace == nullptr || a->workspace_bytes < need) return "v8: backward workspace missing or too small";
  const int bh = a->batch * a->heads, nq = a->seqlen_q, nk = a->seqlen_k;
  if (bh > 65535) return "v8: batch*heads must be <= 65535 (grid y limit)";
  if (a->heads_kv < 1 || a->heads % a->heads_kv != 0) return "v8: heads_kv must divide heads (GQA)";
  const int group = a->heads / a->heads_kv, bh_kv = a->batch * a->heads_kv;
  constexpr int D = C::D;
  if (reinterpret_cast<uintptr_t>(w.lse2) % 16 || reinterpret_cast<uintptr_t>(w.dsum) % 16)
    return "v8: the row statistics must be 16-byte aligned (bulk copies)";

  constexpr int kPreRows = 256 / (D / 8);
  // Deterministic: the turn counters after the accumulator, zeroed (a few KB).
  if constexpr (C::kDqDet) {
    if (cudaMemsetAsync(w.dq_acc + (size_t)bh * w.nq_pad * D, 0, lab_bwd::turn_bytes(a), stream) != cudaSuccess)
      return "v8: zeroing the deterministic dQ's turn counters failed";
  }
  // FragDq: its accumulator covers whole query blocks (nq_pad rows a head), zeroed whole.
  lab_bwd::bwd_preprocess_kernel<T, D, C::kDqFrag><<<dim3(lab_cdiv(w.nq_pad, kPreRows), bh), 256, 0, stream>>>(
      static_cast<const T*>(a->o), static_cast<const T*>(a->dout), a->lse, w.lse2, w.dsum, w.dq_acc, nq, w.nq_pad);
  if (const char* err = lab_last_launch_error()) return err;

  CUtensorMap tm_q, tm_do, tm_k, tm_v;
  if (!lab_tma_map_3d<T>(&tm_q, a->q, D, nq, bh, C::BM) || !lab_tma_map_3d<T>(&tm_do, a->dout, D, nq, bh, C::BM) ||
      !lab_tma_map_3d<T>(&tm_k, a->k, D, nk, bh_kv, C::BN) || !lab_tma_map_3d<T>(&tm_v, a->v, D, nk, bh_kv, C::BN))
    return "v8: cuTensorMapEncodeTiled refused a tensor map (q, k, v, dout must be contiguous and 16-byte aligned)";
  const float scale = a->softmax_scale, scale_log2 = scale * 1.4426950408889634f;
  T* dk = static_cast<T*>(a->dk);
  T* dv = static_cast<T*>(a->dv);
  // TMA-dQ: the fp32 accumulator as the map its reductions write through (boxes of 64 rows).
  CUtensorMap tm_dq;
  if constexpr (C::kDqTma) {
    if (reinterpret_cast<uintptr_t>(w.dq_acc) % 16 || !lab_tma_map_3d_f32(&tm_dq, w.dq_acc, D, nq, bh, 64))
      return "v8: cuTensorMapEncodeTiled refused dQ's fp32 accumulator map";
  }
  if (group == 1) {
    if constexpr (C::kDqTma) {
      auto kernel = bwd_kernel_tdq<C, T, CAUSAL>;
      static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
      if (attr != cudaSuccess) return cudaGetErrorString(attr);
      kernel<<<dim3(lab_cdiv(nk, C::BN), bh), C::kThreads, C::kSmemBytes, stream>>>(
          tm_q, tm_do, tm_k, tm_v, w.lse2, w.dsum, w.dq_acc, dk, dv, nq, nk, w.nq_pad, scale_log2, scale, 1, 1,
          nullptr, nullptr, tm_dq);
    } else {
      auto kernel = bwd_kernel<C, T, CAUSAL>;
      static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
      if (attr != cudaSuccess) return cudaGetErrorString(attr);
      kernel<<<dim3(lab_cdiv(nk, C::BN), bh), C::kThreads, C::kSmemBytes, stream>>>(
          tm_q, tm_do, tm_k, tm_v, w.lse2, w.dsum, w.dq_acc, dk, dv, nq, nk, w.nq_pad, scale_log2, scale, 1, 1,
          nullptr, nullptr);
    }
    if (const char* err = lab_last_launch_error()) return err;
  } else {
    // GQA: one CTA per (key block, K/V head, share of its group), the shares' dK and dV summed after.
    static_assert(C::BN == kGqaKeyBlock, "gqa_splits sizes the workspace for 128-key blocks");
    const int splits = lab_bwd::gqa_splits(a, sm_count(), C::BM, SPLIT);
    const size_t part_bytes = gqa_partial_bytes(a, splits);
    if (a->workspace_bytes < need + 2 * part_bytes) return "v8: backward workspace missing or too small";
    float* dk_part = splits > 1 ? reinterpret_cast<float*>(static_cast<uint8_t*>(a->workspace) + need) : nullptr;
    float* dv_part = splits > 1 ? reinterpret_cast<float*>(static_cast<uint8_t*>(a->workspace) + need + part_bytes) : nullptr;
    if constexpr (C::kDqTma) {
      auto kernel = bwd_kernel_tdq<C, T, CAUSAL, true>;
      static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
      if (attr != cudaSuccess) return cudaGetErrorString(attr);
      kernel<<<dim3(lab_cdiv(nk, C::BN), bh_kv * splits), C::kThreads, C::kSmemBytes, stream>>>(
          tm_q, tm_do, tm_k, tm_v, w.lse2, w.dsum, w.dq_acc, dk, dv, nq, nk, w.nq_pad, scale_log2, scale,
          group / splits, splits, dk_part, dv_part, tm_dq);
    } else {
      auto kernel = bwd_kernel<C, T, CAUSAL, true>;
      static const cudaError_t attr = lab_set_smem(kernel, C::kSmemBytes);  // once per instantiation
      if (attr != cudaSuccess) return cudaGetErrorString(attr);
      kernel<<<dim3(lab_cdiv(nk, C::BN), bh_kv * splits), C::kThreads, C::kSmemBytes, stream>>>(
          tm_q, tm_do, tm_k, tm_v, w.lse2, w.dsum, w.dq_acc, dk, dv, nq, nk, w.nq_pad, scale_log2, scale,
          group / splits, splits, dk_part, dv_part);
    }
    if (const char* err = lab_last_launch_error()) return err;
    if (splits > 1) {
      const size_t n8 = (size_t)bh_kv * nk * D / 8;
      const int blocks = (int)((n8 + 255) / 256 < 132 * 16 ? (n8 + 255) / 256 : 132 * 16);
      lab_bwd::bwd_sum_partials_kernel<T><<<dim3(blocks, 2), 256, 0, stream>>>(dk_part, dv_part, dk, dv,
                                                                                (size_t)nk * D, splits, n8);
      if (const char* err = lab_last_launch_error()) return err;
    }
  }

  if constexpr (C::kDqFrag) {
    const int m_blocks = w.nq_pad / C::BM;
    const size_t shares = (size_t)bh * m_blocks * C::kConsumers;
    const int blocks = (int)(shares < 132 * 32 ? shares : 132 * 32);
    bwd_convert_frag_kernel<C, T><<<blocks, 256, 0, stream>>>(w.dq_acc, static_cast<T*>(a->dq), nq, m_blocks, shares, scale);
    return lab_last_launch_error();
  }
  const size_t n8 = (size_t)bh * nq * D / 8;
  const int blocks = (int)((n8 + 255) / 256 < 132 * 16 ? (n8 + 255) / 256 : 132 * 16);
  lab_bwd::bwd_convert_kernel<T><<<blocks, 256, 0, stream>>>(w.dq_acc, static_cast<T*>(a->dq), n8, scale);
  return lab_last_launch_error();
}

template <class C, GqaSplit SPLIT = lab_bwd::kGqaSplitDefault>
const char* bwd_launch(const LabBackwardArgs* a, cudaStream_t stream) {
  const bool causal = a->causal != 0;
  switch (a->dtype) {
    case LAB_FLOAT16:
      return causal ? bwd_launch_one<C, __half, true, SPLIT>(a, stream) : bwd_launch_one<C, __half, false, SPLIT>(a, stream);
    case LAB_BFLOAT16:
      return causal ? bwd_launch_one<C, __nv_bfloat16, true, SPLIT>(a, stream)
                    : bwd_launch_one<C, __nv_bfloat16, false, SPLIT>(a, stream);
    default: return "v8 supports float16 and bfloat16 only (wgmma rung); use --dtype float16";
  }
}

// The forward: v6's kernel and configurations (v6_wgmma.cu's, measured there), writing the LSE.
using Fwd64 = lab_hopper_fwd::Config<64, 128, 2, false, 1>;
using FwdLong64 = lab_hopper_fwd::Config<64, 128, 2, false, 3>;
using Fwd128 = lab_hopper_fwd::Config<128, 128, 2, false, 2>;
constexpr int kLongKeys = 8192;
template <class C, bool CAUSAL>
const char* fwd_launch(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->lse != nullptr ? lab_hopper_fwd::launch<C, CAUSAL, true>(a, stream)
                           : lab_hopper_fwd::launch<C, CAUSAL, false>(a, stream);
}

// The backward's configurations: D, BM query rows per step, stages of the Q/dO ring, bulk dQ.
// Both head dims: dQ's fp32 accumulator in the wgmma fragment's order, added by 1-D bulk reductions
// from the producer warpgroup's dQ writer (steps 4, 5 and 5b: 1.11-1.26x step 3's defaults, then
// 1.03-1.06x TMA-dQ, on an H200); D = 128 on overlap-FA3's order (step 3), D = 64 on order 0 (step
// 1: overlap-FA3's causal kernels spill at D = 64).
// Step 6a: dK and dV leave through a shared tile with 16-byte stores (StagedEpilogue<>, 1.02-1.12x).
using BwdDefault64 = StagedEpilogue<FragDq<BwdConfig<64, 128, 2, false>>>;
using BwdDefault128 = StagedEpilogue<FragDq<Overlapped<BwdConfig<128, 64, 2, false>, 1>>>;

// The deterministic mode (args->deterministic, `--deterministic`; common.cuh's deterministic contract):
// the default's tiles and order with TMA-dQ's reductions taken in key-block order (Deterministic<>).
// Written in terms of the defaults: a default on TMA-dQ is wrapped as it is; one on frag-dQ
// (FragDq<B>) is wrapped as TmaDq<B>, and a staged epilogue (StagedEpilogue<B>) is taken off: the
// deterministic path that was checked and measured (neither Deterministic<FragDq<>> nor a
// deterministic staged epilogue has ever run). The same types as the tuning candidates "...
// deterministic" below, so `lab tune` measures the kernels --deterministic runs.
template <class C> struct DeterministicOf { using type = Deterministic<C>; };
template <class B> struct DeterministicOf<FragDq<B>> { using type = Deterministic<TmaDq<B>>; };
template <class B> struct DeterministicOf<StagedEpilogue<B>> : DeterministicOf<B> {};
using BwdDeterministic64 = DeterministicOf<BwdDefault64>::type;
using BwdDeterministic128 = DeterministicOf<BwdDefault128>::type;

// The workspace: the shared layout (bwd_prepost.cuh), then dK's and dV's partials when the group is
// split. The plain build's launcher (the default, or --deterministic: the same BM) splits by
// kGqaSplitDefault at the default's BM; the tuning build's candidates may split more (either policy,
// either BM; kCausalBalance never splits less than kFillSms): its workspace covers the most.
static_assert(BwdDeterministic64::BM == BwdDefault64::BM && BwdDeterministic128::BM == BwdDefault128::BM,
              "the deterministic mode splits a GQA group as the default does");
static size_t workspace_bytes(const LabBackwardArgs* a) {
  const int sms = sm_count();
#ifdef LAB_TUNING
  int splits = 1;
  for (int bm : {64, 128}) {
    for (GqaSplit policy : {GqaSplit::kFillSms, GqaSplit::kCausalBalance}) {
      const int s = lab_bwd::gqa_splits(a, sms, bm, policy);
      splits = s > splits ? s : splits;
    }
  }
#else
  const int splits = lab_bwd::gqa_splits(a, sms, a->head_dim == 64 ? BwdDefault64::BM : BwdDefault128::BM);
#endif
  return lab_bwd::workspace_bytes(a) + 2 * gqa_partial_bytes(a, splits);
}

#ifdef LAB_TUNING
// Candidates for `lab tune --variant v8 [--mode bwd]` (common.cuh's tuning contract). Forward: the
// launcher's own configurations (v6's, measured there). Backward: BM query rows per step, S stages,
// and how dQ reaches its fp32 accumulator (RED from registers, or bulk reductions of a staged tile).
template <class C>
const char* fwd_any(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? fwd_launch<C, true>(a, stream) : fwd_launch<C, false>(a, stream);
}
static const LabTuneCandidate kFwd64[] = {{"C1 BN128 S2 (v6 default)", fwd_any<Fwd64>}};
static const LabTuneCandidate kFwd128[] = {{"C2 BN128 S2 (v6 default)", fwd_any<Fwd128>}};
static LabTuneList fwd_candidates(int head_dim) {
  return head_dim == 64 ? lab_tune_list(kFwd64) : head_dim == 128 ? lab_tune_list(kFwd128) : LabTuneList{nullptr, 0};
}
struct BwdCandidate {
  const char* label;
  const char* (*launch)(const LabBackwardArgs* args, cudaStream_t stream);
};
// Step 3 (v8_notes.md, predictions written before any was run): a third stage, and the overlapped
// orders (Overlapped<>: overlap-FA3 = 1, overlap-next = 2) with RED-dQ. Step 4 (v8_notes.md, its
// prediction written before any run): TMA-dQ (TmaDq<>, one staging buffer per warpgroup, as
// FlashAttention-3 has).
static const BwdCandidate kBwd64[] = {
    {"BM128 S2 RED-dQ", bwd_launch<BwdConfig<64, 128, 2, false>>},
    {"BM128 S2 bulk-dQ", bwd_launch<BwdConfig<64, 128, 2, true>>},
    {"BM128 S3 RED-dQ", bwd_launch<BwdConfig<64, 128, 3, false>>},
    {"BM128 S2 RED-dQ overlap-next", bwd_launch<Overlapped<BwdConfig<64, 128, 2, false>, 2>>},
    {"BM128 S2 TMA-dQ", bwd_launch<TmaDq<BwdConfig<64, 128, 2, false>>>},
    {"BM128 S2 frag-dQ", bwd_launch<FragDq<BwdConfig<64, 128, 2, false>>>},
    {"BM128 S2 frag-dQ staged-dKdV", bwd_launch<StagedEpilogue<FragDq<BwdConfig<64, 128, 2, false>>>>},
    {"BM128 S2 TMA-dQ deterministic", bwd_launch<BwdDeterministic64>},
    // Causal GQA (v8_notes.md): the default's kernels, its group split until no CTA holds more than
    // half an SM's fair share of query steps (the default since 2026-11-27, so this is the default by
    // name), and the split before it (only until one CTA per SM), kept to be measured again. The same
    // machine code; only the grid and the partials.
    {"BM128 S2 frag-dQ staged-dKdV GQA-causal-split", bwd_launch<BwdDefault64, GqaSplit::kCausalBalance>},
    {"BM128 S2 frag-dQ staged-dKdV GQA-fill-SMs", bwd_launch<BwdDefault64, GqaSplit::kFillSms>},
};
static const BwdCandidate kBwd128[] = {
    {"BM64 S2 RED-dQ", bwd_launch<BwdConfig<128, 64, 2, false>>},
    {"BM64 S2 bulk-dQ", bwd_launch<BwdConfig<128, 64, 2, true>>},
    {"BM64 S3 RED-dQ", bwd_launch<BwdConfig<128, 64, 3, false>>},
    {"BM64 S2 RED-dQ overlap-FA3", bwd_launch<Overlapped<BwdConfig<128, 64, 2, false>, 1>>},
    {"BM64 S2 RED-dQ overlap-next", bwd_launch<Overlapped<BwdConfig<128, 64, 2, false>, 2>>},
    {"BM64 S3 RED-dQ overlap-next", bwd_launch<Overlapped<BwdConfig<128, 64, 3, false>, 2>>},
    {"BM64 S2 TMA-dQ overlap-FA3", bwd_launch<TmaDq<Overlapped<BwdConfig<128, 64, 2, false>, 1>>>},
    {"BM64 S2 frag-dQ overlap-FA3", bwd_launch<FragDq<Overlapped<BwdConfig<128, 64, 2, false>, 1>>>},
    {"BM64 S2 frag-dQ overlap-FA3 staged-dKdV", bwd_launch<StagedEpilogue<FragDq<Overlapped<BwdConfig<128, 64, 2, false>, 1>>>>},
    {"BM64 S2 TMA-dQ overlap-FA3 deterministic", bwd_launch<BwdDeterministic128>},
    {"BM64 S2 frag-dQ overlap-FA3 staged-dKdV GQA-causal-split", bwd_launch<BwdDefault128, GqaSplit::kCausalBalance>},
    {"BM64 S2 frag-dQ overlap-FA3 staged-dKdV GQA-fill-SMs", bwd_launch<BwdDefault128, GqaSplit::kFillSms>},
};
template <int N>
static const char* bwd_labels(const BwdCandidate (&items)[N]) {
  static thread_local std::string joined;
  joined.clear();
  for (int i = 0; i < N; ++i) {
    if (i) joined += ';';
    joined += items[i].label;
  }
  return joined.c_str();
}
#endif

}  // namespace v8

static const char* refuse(int head_dim, int nq, int nk, float scale, std::initializer_list<const void*> ptrs) {
  if (head_dim != 64 && head_dim != 128) return "v8 supports head_dim 64 and 128";
  if (nq < 1 || nk < 1) return "v8 needs seqlen_q >= 1 and seqlen_k >= 1";
  // The forward takes the row max on raw scores and scales afterwards, which needs a positive scale.
  if (!(scale > 0.f)) return "v8 needs softmax_scale > 0";
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "v8 needs every tensor 16-byte aligned (TMA)";
  if (lab_hopper_refusal() != nullptr) return "v8 needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma + TMA); this GPU is not one";
  if (!lab_tma_encode_tiled()) return "v8: the driver has no cuTensorMapEncodeTiled (needs CUDA 12+ driver)";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v8(const LabAttentionArgs* a, cudaStream_t stream) {
  if (const char* why = refuse(a->head_dim, a->seqlen_q, a->seqlen_k, a->softmax_scale, {a->q, a->k, a->v, a->o}))
    return why;
  if (a->head_dim == 64) {
    if (a->causal) return v8::fwd_launch<v8::Fwd64, true>(a, stream);
    return a->seqlen_k >= v8::kLongKeys ? v8::fwd_launch<v8::FwdLong64, false>(a, stream)
                                        : v8::fwd_launch<v8::Fwd64, false>(a, stream);
  }
  return a->causal ? v8::fwd_launch<v8::Fwd128, true>(a, stream) : v8::fwd_launch<v8::Fwd128, false>(a, stream);
}

LAB_EXPORT size_t lab_backward_v8_workspace(const LabBackwardArgs* args) { return v8::workspace_bytes(args); }

LAB_EXPORT const char* lab_backward_v8(const LabBackwardArgs* a, cudaStream_t stream) {
  if (const char* why = refuse(a->head_dim, a->seqlen_q, a->seqlen_k, a->softmax_scale,
                               {a->q, a->k, a->v, a->o, a->dout, a->dq, a->dk, a->dv}))
    return why;
  if (a->deterministic)   // dQ's reductions in key-block order: dQ, dK, dV the same bits on every run
    return a->head_dim == 64 ? v8::bwd_launch<v8::BwdDeterministic64>(a, stream)
                             : v8::bwd_launch<v8::BwdDeterministic128>(a, stream);
  if (a->head_dim == 64) return v8::bwd_launch<v8::BwdDefault64>(a, stream);
  return v8::bwd_launch<v8::BwdDefault128>(a, stream);
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v8_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(v8::fwd_candidates(head_dim));
}
LAB_EXPORT const char* lab_forward_v8_config(const LabAttentionArgs* a, cudaStream_t stream, int config) {
  if (const char* why = refuse(a->head_dim, a->seqlen_q, a->seqlen_k, a->softmax_scale, {a->q, a->k, a->v, a->o}))
    return why;
  return lab_tune_launch(v8::fwd_candidates(a->head_dim), a, stream, config);
}
LAB_EXPORT const char* lab_backward_v8_configs(int head_dim, LabDtype dtype) {
  if (dtype == LAB_FLOAT32) return "";
  if (head_dim == 64) return v8::bwd_labels(v8::kBwd64);
  if (head_dim == 128) return v8::bwd_labels(v8::kBwd128);
  return "";
}
LAB_EXPORT const char* lab_backward_v8_config(const LabBackwardArgs* a, cudaStream_t stream, int config) {
  if (const char* why = refuse(a->head_dim, a->seqlen_q, a->seqlen_k, a->softmax_scale,
                               {a->q, a->k, a->v, a->o, a->dout, a->dq, a->dk, a->dv}))
    return why;
  const int n = a->head_dim == 64 ? (int)(sizeof(v8::kBwd64) / sizeof(v8::kBwd64[0]))
                                  : (int)(sizeof(v8::kBwd128) / sizeof(v8::kBwd128[0]));
  if (config < 0 || config >= n) return "tuning candidate index out of range for this head_dim and dtype";
  return (a->head_dim == 64 ? v8::kBwd64 : v8::kBwd128)[config].launch(a, stream);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v8"
// slug = "wgmma_bwd"
// title = "Hopper backward: wgmma + TMA, a producer warp feeding two consumer warpgroups, with v6's forward writing the LSE (sm_90a)"
// dtypes = ["float16", "bfloat16"]
// head_dims = [64, 128]
// min_cc = "9.0"             # wgmma, TMA, setmaxnreg: Hopper only
// arch_flags = ["-gencode=arch=compute_90a,code=sm_90a"]
// attacks = ["memory-bound"]  # v7's main loop: L1TEX-bound on ldmatrix operand traffic (its stored profile)
// grid = "q-tiles,bh"        # forward as v6; backward: key blocks on grid.x, batch*heads on grid.y (<= 65535)
// aligned16 = true           # TMA: the launchers refuse tensors not 16-byte aligned
// backward = true
// gqa = true                 # K/V heads dividing Q's: the group's query heads in one CTA per K/V head (header)
// deterministic = true       # --deterministic: dQ's reductions in key-block order (header, "Deterministic dQ")
// lab:end
