// v9_wgmma_fa3: the Hopper forward beyond cuDNN (issue 28), FlashAttention-3's schedule built step
// by step from the Hopper headers by role (hopper/tma_pipeline.cuh, wgmma.cuh, fwd_wgmma.cuh,
// tile_scheduler.cuh); fp16 and bf16 in, fp32 accumulate, sm_90a only. Writes the row
// log-sum-exp when args->lse is given (the statistic v8's backward reads; fwd_wgmma.cuh's WRITE_LSE).
//
// What changed since v6: step 1, a persistent tile scheduler (hopper/tile_scheduler.cuh,
//   lab_hopper_sched::Persistent). v6 launches one CTA per tile (B*H*ceil(N/BM) CTAs: 8,192 at
//   N=512 D=64 on the FlashAttention grid) and each pays its own prologue (barrier init,
//   setmaxnreg, tensor-map prefetch, the Q load's full latency before its first S = Q K^T) and
//   epilogue. v9 launches as many CTAs as the GPU holds at once (132 SMs x 2 at D=64, x 1 at
//   D=128, from the occupancy calculator) and each walks units of equal work head by head (causal:
//   a head's query blocks m-1-p and p, heavy then light; non-causal: one tile) with a static
//   stride that reverses direction every other round (tile_scheduler.cuh says why not v6's
//   longest-first order: balance and L2 under a static walk). The K/V ring's
//   stage and phase run on across tiles; the consumers free Q (mbarrier q_empty) as soon as their
//   last S = Q K^T of a tile is done, so the producer loads the next tile's Q and first K/V tiles
//   while the consumers still run the tile's last P V and its epilogue. The main loop (warp
//   specialisation, softmax under P V, the tiles and their configurations) is v6's, unchanged.
// Bottleneck it attacks: the short-sequence and causal cells where v6 trails cuDNN (H100,
//   2026-11-26, fa-grid, events: N=512 causal 0.70x at D=64 and D=128, N=1024 causal 0.80x; v6
//   >= cuDNN in 4 of 24 fp16 cells). There a CTA has 1-8 key tiles, so the fixed per-CTA cost is a
//   large share of its time; the H200 table of v6 (benchmarks/RESULTS.md) shows the same shape of
//   loss: 0.78-0.86x cuDNN at N=1024, 0.97-1.02x from N=8192. v6's stored profile
//   (profiles/examples/20261123-200956-v6-B8-H16-N1024-D64-float16) is one such short-sequence
//   launch.
// Predicted gain (written before measuring, 2026-11-26): against v6 in the same sweep, D=128 (one
//   CTA per SM in v6, so nothing hides its prologue and epilogue): 1.10-1.25x on causal N <= 1024,
//   1.03-1.10x on non-causal N <= 1024 and causal N = 2048; D=64 (v6 already runs two CTAs per SM,
//   each hiding the other's prologue): 1.03-1.12x on causal N <= 1024, 1.00-1.05x non-causal
//   N <= 1024; 0.97-1.03x (no change) from N = 4096, where a tile has 32+ key tiles (and where the
//   static walk's last round is partly empty on the fa-grid, 4,096 units over 264 CTAs at D=64,
//   1,024 over 132 at D=128, while v6's hardware hand-out ends on its shortest tiles: up to 3% to
//   lose there). So N=512 causal
//   about 0.80-0.90x cuDNN instead of 0.70x on an H100. Not the whole gap: each consumer's epilogue
//   still stalls its own next main loop (O stored from registers; FA3's TMA store and the
//   inter-warpgroup ping-pong are later steps).
// Measured (two NVIDIA H200s, 2026-11-27, commit c98dadc). Correct (`STEPS="tests slow check" bash
//   benchmarks/v9_gpu.sh`): tests/test_v9_gpu.py 19 passed (13 float64 cases with many tiles per
//   CTA, the LSE on 4, refusals, compute-sanitizer memcheck), racecheck and synccheck 0 hazards,
//   `lab check --variant v9` 24 seeded shapes in each of fp16/bf16 x causal/not (worst: bf16 causal,
//   max_abs_err 0.00841 against a tolerance of 0.0229). Timed in the honest grid (`lab sweep
//   --variant v6,v7,v8,v9 --preset fa-grid --mode fwd,bwd,fwd+bwd --dtype float16,bfloat16 --timing
//   both --baselines sdpa-cudnn,sdpa-flash,sdpa-efficient --gpus 0,1`; profiles/examples/
//   20261127-030127-sweep-honest-grid, its table in benchmarks/RESULTS.md). Against v6 (same sweep,
//   events and graph, fp16 and bf16) the prediction held for short work and missed for long D=128
//   non-causal work: causal N <= 1024 1.09-1.28x at D=128 (predicted 1.10-1.25x), 1.12-1.23x at D=64
//   (predicted 1.03-1.12x); non-causal N <= 1024 0.99-1.10x at D=128 (1.03-1.10x), 1.01-1.10x at
//   D=64 (1.00-1.05x); causal N=2048 D=128 1.03-1.08x (1.03-1.10x); from N=4096 (predicted
//   0.97-1.03x) D=64 0.96-1.05x, D=128 causal 0.95-1.04x (0.95-0.96x at N=16384) and **D=128
//   non-causal 0.93-0.95x**: more than the static walk's last round can cost (v6's grid runs the same
//   2,048 equal tiles on 132 SMs, so the quantisation is the same); benchmarks/v9_notes.md has the
//   next measurement. Against SDPA cuDNN (same cell, same timing): events (call latency) fp16 13 of
//   24 cells >= 1.0x (0.92-1.17x), bf16 14 of 24 (0.93-1.18x); graph (device time) fp16 5 of 24
//   (0.75-1.15x), bf16 5 of 24 (0.76-1.13x); v6 in the same sweep: events 10 and 9 of 24, graph 7
//   and 6. In device time v9 trails cuDNN in every cell with N <= 4096, most at N=512 D=128 non-causal
//   (0.75-0.76x); its events wins there are cuDNN's host dispatch (events minus graph: cuDNN 28-62 us
//   per call at N <= 2048, v9 under 30 us), not a faster kernel. D=128, N >= 8192, non-causal: v9
//   607-675 TFLOP/s (fp16 607 and 628 events, 617 and 633 graph; bf16 643 and 665, 649 and 675),
//   below issue 28's 690 (set for an H100; these are H200s) and below v6's 653-710 on the same cells.
//   Issue 28's target is not met.
// Profile it: lab profile --variant v9 --dtype float16 --shape 32,16,512,128 --causal
//
// GQA (`gqa = true`, sixth session): the walk's producer loads K/V head bh / (H/Hkv) of each tile
//   (fwd_wgmma.cuh's GQA instantiation). tests/test_gqa_gpu.py on an H200 (2026-11-27, commit
//   e3bf36b): 41 passed, v9's forward on 8 GQA cases among them (groups of 4 and 8, MQA included,
//   ragged N and Nq != Nk, both masks, fp16 and bf16).
//
// Step 2, the default at D=128 non-causal is ping-pong on the persistent grid (seventh session,
//   2026-11-27). What changed: lab_forward_v9 launches PingPong128 (Config<128, 128, 2, true, 2>,
//   Persistent) for D=128 non-causal problems, the two consumer warpgroups taking turns at the tensor
//   cores (fwd_wgmma.cuh's turn_wait / turn_pass, the turns running on across a CTA's tiles). D=128
//   causal keeps Default128 persistent, D=64 is unchanged. The kernels are the tuning candidate "C2
//   BN128 S2 persistent pp"'s own type (the candidate list names PingPong128 too): all 40 kernels of
//   the plain build (8 new, 32 unchanged) are, cuobjdump -sass function by function (nvcc 13.0), the
//   same functions of the tuning build that was timed (226d993); 168 registers, 0 spills;
//   tests/test_v9_tuning_build.py holds it. A new candidate, "C2 BN128 S2 one-tile-per-CTA pp" (v6's
//   grid with ping-pong), asks whether ping-pong pays on v6's grid too or only on the walk.
//   Evidence (`lab tune --variant v9`, one H200 of four beside other GPU work, 2026-11-27, commit
//   226d993; every candidate gated, 30 interleaved repetitions, L2 flushed, every timed output
//   checked; against the persistent default): persistent pp 1.068x at 2,16,8192,128 fp16 (1.6531 ms,
//   665.1 TFLOP/s), 1.053x at 1,16,16384,128 bf16 (3.1775 ms, 692.1), 1.045x at 32,16,512,128 fp16
//   (0.1770 ms, 388.3), 0.993x causal at 32,16,512,128 (CI95s overlap: no change). One tile per CTA
//   (v6's grid): 1.073x and 1.063x at the long shapes, 0.940x and 0.794x (causal) at N=512. So one
//   choice for every non-causal D=128 problem: ping-pong persistent is the fastest at N=512 (1.11x one
//   tile per CTA) and within 0.5% and 0.9% of one tile per CTA at N=8192 and 16384, under the lab's
//   3% practical threshold; a switch per N would rest on a boundary no run measured.
//   Predicted (written before the GPU confirms it): `lab tune` shows the default level with "C2 BN128
//   S2 persistent pp" (within CI95) at D=128 non-causal and with "C2 BN128 S2 persistent" causal;
//   against step 1 on the fa-grid, D=128 non-causal 1.04-1.07x at every N (so v9 / v6 from 0.93-0.95x
//   to 0.97-1.02x at N >= 4096), 630-720 TFLOP/s at N >= 8192 on an H200 (607-675 before), v9 /
//   cuDNN (graph) 0.98-1.09x there (0.94-1.02x before) and at N=512 0.78-0.82x (0.75-0.76x before):
//   ping-pong does not close the short cells. v9+v8 forward+backward at D=128 non-causal 1.01-1.02x
//   (the forward is 21-26% of the pair's graph time in this session's target sweep, four H200s).
//   One tile per CTA with ping-pong: 0.96-1.00x one tile per CTA at N >= 8192 (v6 run 4: ping-pong did
//   not pay on v6's grid, 0.96x at N=16384), so no faster than persistent pp there.
//   Measured (four H200s, 2026-11-27, commit 1ade183, `lab tune --variant v9`): the default level with
//   "C2 BN128 S2 persistent pp" (1.001x at 2,16,8192,128, 0.998x at 32,16,512,128) and 1.073x / 1.042x
//   "C2 BN128 S2 persistent" (predicted 1.04-1.07x): held.
//
// Step 3, ping-pong persistent at D=128 causal too (eighth session, 2026-11-27). Evidence (`lab
//   tune --variant v9 --causal`, one H200 of four, commit 1ade183): "C2 BN128 S2 persistent pp" 1.067x
//   the causal default (persistent, no ping-pong) at 1,16,16384,128 fp16 (1.6992 against 1.8138 ms,
//   647.1 TFLOP/s), level at 32,16,512,128 (0.993x, the seventh session). The same call confirmed step
//   2: the default level with its candidate (1.001x at 2,16,8192,128, 0.998x at 32,16,512,128) and
//   1.072x / 1.041x the step-1 default. Change: lab_forward_v9 launches PingPong128 for D=128 causal
//   as well. Predicted (before the GPU): against "C2 BN128 S2 persistent" (the old causal default),
//   0.98-1.02x at causal N <= 1024, 1.02-1.07x at N >= 4096. Measured (four H200s, commit ea49cdd,
//   `lab tune --variant v9 --causal`, fp16): 0.999x at 32,16,512,128, 1.018x at 16,16,1024,128, 1.057x
//   at 4,16,4096,128, 1.071x at 2,16,8192,128: held (the last at the band's top). On the fa-grid (graph)
//   v9 D=128 causal is 1.012-1.104x cuDNN at N >= 4096, 0.81-0.98x below (RESULTS.md).
//
// Step 4, short sequences, as `lab tune` candidates only (eighth session, 2026-11-27, CPU: no GPU time;
//   the default is unchanged). (a) "C1 BN64 S2 persistent" at D=128 (Short128, Config<128, 64, 2,
//   false, 1>): one consumer warpgroup of 64 rows, key tiles of 64, two CTAs per SM (81 KB of shared
//   memory each), so one CTA's tile start and epilogue run under the other's main loop and N=512 has
//   twice the tiles; 128 registers at launch (producer 32, consumer 224), 0 spills (nvcc 13.0).
//   Predicted (benchmarks/v9_notes.md, "Step 4", before any GPU run), against the default, fp16:
//   32,16,512,128 0.95-1.06x non-causal, 1.03-1.15x causal; 16,16,1024,128 0.85-0.97x and 0.97-1.08x;
//   2,16,8192,128 0.72-0.82x and 0.80-0.92x (K/V read from L2 once per 64 query rows: an L2 ceiling
//   at long N). Measured (one H100, 2026-11-27, main 3aa75c4, `lab tune --variant v9 --dtype float16`,
//   30 interleaved rounds, L2 flushed, paired CI95): 0.877x / 0.972x at 32,16,512,128, 0.840x / 0.920x
//   at 16,16,1024,128, 0.805x at 2,16,8192,128 non-causal: below every band but the last (why: v9_notes,
//   "Step 4 measured"). Not taken.
//   (b) O stored through shared memory by TMA (fwd_wgmma.cuh's OByTma, FA3's epilogue in v9's own
//   code): each consumer warpgroup writes O / l into a swizzled 64-row buffer and one thread issues
//   the TMA store, so the warpgroup starts its next tile at once; "C2 BN128 S2 persistent pp tma-o"
//   (the default plus the buffer: 193 KB, 168 registers) and "C1 BN64 S2 persistent tma-o" (on (a): 97
//   KB, 128), 0 spills. Predicted against the default, fp16: pp tma-o 1.02-1.07x / 1.02-1.08x
//   (non-causal / causal) at 32,16,512,128, 1.01-1.04x / 1.01-1.05x at 16,16,1024,128, 0.99-1.01x /
//   0.99-1.02x at 2,16,8192,128; BN64 tma-o (a)'s bands x 1.01-1.04x at N=512. Measured (the same
//   tunes): pp tma-o 1.094x / 1.053x at 32,16,512,128, 1.077x / 1.081x at 16,16,1024,128, 1.012x at
//   2,16,8192,128 non-causal (above the bands but causal N=512: the register epilogue cost more than
//   modelled); BN64 tma-o 0.981x / 1.096x, 0.914x / 0.986x, 0.828x (inside its bands).
//
// Step 4 (b) taken: O stored by TMA is v9's default at D=128, both masks (ninth session, 2026-11-27;
//   confirmed on two H200s at 0e3a7ee, below). What changed: lab_forward_v9 launches PingPong128OTma
//   (OByTma<PingPong128>, Persistent), the type "C2 BN128 S2 persistent pp tma-o" names: the plain
//   build's 16 D=128 kernels are, cuobjdump -sass function by function (nvcc 13.0, sm_90a), the tuning
//   build's fwd_kernel_o_tma instances that were timed; the 24 D=64 kernels, v6 and v8 unchanged; 168
//   registers, 0 spills, 193 KB of shared memory a CTA (one per SM, as before). The step-3 default
//   stays a candidate, "C2 BN128 S2 persistent pp (step-3 default)". O's tensor map has Q's dims,
//   strides and alignment (box rows 64 <= BM), so any problem the Q map takes, the O map takes: rows
//   past nq, whole boxes past it (N = 1's second warpgroup), Nq != Nk, GQA are the copy engine's
//   bounds, not a refusal. Bottleneck it attacks: the epilogue's uncoalesced stores (the default's
//   profile, profiles/examples/20261127-085257-v9-B2-H16-N8192-D128-float16: compute-bound, tensor
//   pipe 73.1%, then global stores with 50% excess sectors: O written from the accumulators' pairs, 16
//   bytes of each 32-byte sector per quad), which hold each consumer warpgroup off its next tile; at
//   short N a CTA has few tiles and the epilogue is a large share. Predicted and measured: above.
//   Issue 28's target is still not met: N=512 needed 1.23x to reach cuDNN (H200 grid), this gives
//   1.05-1.09x.
//   O by TMA at D=64, a candidate ("C1 BN128 S2 persistent tma-o", OByTma<Default64>: 81 KB a CTA, two
//   per SM, 128 registers, 0 spills). Predicted (benchmarks/v9_notes.md, "O by TMA at D=64", before
//   any GPU run), against the D=64 default, fp16, non-causal / causal: 1.04-1.10x / 1.04-1.11x at
//   32,32,512,64, 1.02-1.07x / 1.02-1.06x at 16,32,1024,64, 1.00-1.05x / 1.00-1.04x at 4,32,4096,64.
//   Measured (two H200s of one host, the other running GPU tests: not quiet; 2026-11-27, main
//   0e3a7ee, `lab tune --variant v9 --dtype float16`, 30 interleaved rounds, L2 flushed, paired
//   rounds' median and its CI95, as dd5dee0 judges): 1.020x (0.994-1.041) at 32,32,512,64, 1.052x
//   (1.038-1.066) causal, 1.022x (1.012-1.031) at 16,32,1024,64 (ratios of medians 1.013x, 1.077x,
//   1.020x); never slower. Inside the band causal and at N=1024, below at N=512 non-causal (a
//   reading, not measured: the other two points give the same exposed register epilogue, about 0.13-
//   0.17 of a key tile's time a tile, which at N=512's 4 key tiles a tile means 1.03-1.04x; this
//   run's candidate CI95 there is twice the default's, the neighbour GPU's work; v9_notes).
//   4,32,4096,64 not run.
//   The same call confirmed the D=128 switch: `lab check --variant v9` fp16/bf16, causal and not (24
//   shapes each), tests/test_v9_gpu.py (22 passed; step 4's candidates 33 passed, memcheck clean),
//   tests/test_gqa_gpu.py (41 passed), `lab check --variant v9+v8`; `lab tune` at 32,16,512,128:
//   "pp tma-o" 1.016x the default (0.995-1.025; one kernel; predicted 0.98-1.02x), the step-3 default
//   0.901x (0.890-0.916; predicted 0.90-0.96x): both inside.
//
// Step 4 (b) at D=64 taken: O stored by TMA is v9's default at D=64 too, causal and non-causal below
//   kLongKeys (ninth session, 2026-11-27, written on the CPU; confirmed on two H200s in the tenth,
//   below), faster at every shape timed (above). What changed: lab_forward_v9 launches Default64OTma (OByTma<Default64>,
//   Persistent), the type "C1 BN128 S2 persistent tma-o" names: the plain build's 16 Default64 kernels
//   are, cuobjdump -sass function by function (nvcc 13.0, sm_90a), the tuning build's fwd_kernel_o_tma
//   instances that were timed; the 16 D=128 and 8 Long64 kernels unchanged; 128 registers, 0 spills,
//   81 KB a CTA (two per SM, as before). Long64 (three consumers, non-causal, Nk >= kLongKeys) keeps O
//   from the accumulators: no candidate put O by TMA on it. The old default stays a candidate, "C1
//   BN128 S2 persistent (step-3 default)". What has run on a GPU is the candidate's kernels (float64 on
//   8 D=64 shapes with the LSE, memcheck); not racecheck or synccheck at D=64, not the default's path
//   (lab check, GQA). Confirmed as the default (two NVIDIA H200s, main 7231ca0, 2026-11-27 ~13:50 UTC,
//   the tenth session): `lab check --variant v9` fp16/bf16, causal and not, all rc=0;
//   tests/test_v9_gpu.py 55 passed, 10 skipped (the slow tier); tests/test_gqa_gpu.py -k v9 8 passed
//   (D=64 GQA through O by TMA); `lab check --variant v9+v8 --dtype float16 --causal` passed; `--run-slow`
//   memcheck, racecheck and synccheck through the default (D=64 O by TMA included) 3 passed, clean.
//   `lab tune --variant v9 --dtype float16` at 32,32,512,64 (paired median, CI95): "C1 BN128 S2
//   persistent tma-o" 1.000x the default (0.995-1.010; predicted 0.98-1.02: inside, one kernel) and
//   0.997x causal (0.985-1.006; inside); the step-3 default 0.981x (0.969-0.988; predicted 0.94-0.99:
//   inside) and 0.952x causal (0.939-0.966; 0.92-0.97: inside). In the same tunes, non-causal: "C3
//   BN128 S2 persistent (non-causal)" (Long64) 0.936x, "C2 BN128 S2 persistent pp" 0.916x.
//
// Step 5, D=64 on three consumer warpgroups, as `lab tune` candidates only (tenth session, 2026-11-27,
//   CPU: no GPU time; the default is unchanged). Why: on the fa-grid after step 4 (two H200s, main
//   7231ca0, graph replay) v9 >= cuDNN in 26 of 48 cells, and 16 of the 22 below are D=64 at N <= 4096
//   (0.960-0.994x, both masks), where the default (BM = 64) runs at a steady 2-3% under cuDNN's main-loop
//   rate (361-471 TFLOP/s non-causal, flat at about 470 from N=4096); Long64 (BM = 192, three consumer
//   warpgroups, non-causal Nk >= 8192) runs 533-545, 1.10x cuDNN: three warpgroups per SM instead of
//   two to overlap softmax (at D=64 a key tile's exponentials take the MUFU pipe as long as its products
//   the tensor pipe) with products, and each K/V tile from L2 serves 192 rows, not 64. What changed:
//   "C3 BN128 S2 persistent tma-o" (Long64OTma: OByTma<Long64>, both masks) and "C3 BN128 S2 persistent
//   tma-o own-tiles" (Long64OTmaOwn: the same with fwd_wgmma.cuh's OwnKeyTiles, each warpgroup computing
//   only the key tiles its own rows see: causal, BM = 192 otherwise computes 1.09-1.35x BM = 64's
//   scores at N <= 4096; a ragged last block's warpgroups past nq compute one key tile, where BM = 192
//   computes 1.125x the rows at N = 512 and 1024). 89 + 24 KB a CTA, one per SM; 128 registers at launch
//   (producer 32, consumers 160), 0 spills (nvcc 13.0; the three-consumer epilogue takes its per-thread
//   box offsets from an opaque copy of the thread index, else ptxas spilled 4-16 bytes of them); the
//   plain build's 40 kernels and every existing candidate's unchanged, cuobjdump -sass function by
//   function, v6 and v8 too. Predicted (benchmarks/v9_notes.md, "Step 5", before any GPU run), against
//   the default, fp16, tma-o / own-tiles: 32,32,512,64 0.93-1.03 / 0.98-1.10x; 16,32,1024,64 0.96-1.03 /
//   1.00-1.10x; 8,32,2048,64 1.06-1.13 / 1.08-1.15x; 4,32,4096,64 1.07-1.13 / 1.08-1.15x; causal
//   0.76-0.87 / 0.86-1.04x, 0.80-0.88 / 0.89-1.04x, 0.97-1.05 / 1.02-1.13x, 1.00-1.07 / 1.04-1.13x. If
//   they hold, BM = 192 with O by TMA is the D=64 default from N = 2048 in both masks (kLongKeys down).
//   Measured (two NVIDIA H200s, main 0955fd7, 2026-11-27, the eleventh session; `lab tune --variant v9
//   --dtype float16`, paired median of 30 rounds against the default, the other GPU running tests):
//   tma-o / own-tiles / Long64 (O from the accumulators, non-causal): 32,32,512,64 0.955 / 0.956 /
//   0.958x; 16,32,1024,64 0.918 / 0.938 / 0.922x; 8,32,2048,64 0.994 / 1.018 / 1.020x; 4,32,4096,64
//   1.011 / 1.024 / 1.041x; causal (tma-o / own-tiles) 0.855 / 0.925x, 0.838 / 0.840x, 0.896 / 0.880x,
//   1.001 / 0.969x. 5 of 18 predictions inside, 13 below: the rate per score A measured at N = 8192
//   does not carry to N <= 4096, O by TMA costs three consumers 2-3% where it saved one 1-8%, and
//   causal own-tiles loses where the model had it win (benchmarks/v9_notes.md, "Step 5 measured").
//   No step-5 candidate becomes a default; (b) below is what the measurements pointed to.
// Step 5 (b), the D=64 non-causal default from Nq, Nk >= 2048 (eleventh session, 2026-11-27): Long64
//   with OwnKeyTiles and O from the accumulators ("C3 BN128 S2 persistent own-tiles (non-causal)",
//   Long64Own), where Nk >= 8192 ran Long64 and below it Default64OTma. Bottleneck it attacks: the
//   default's steady 2-3% under cuDNN's main-loop rate at D=64 (above); evidence: the tunes above,
//   Long64 1.020x / 1.041x the default at N = 2048 / 4096 and own-tiles 1.024x / 1.013x its O-by-TMA
//   twin there (the ragged block's idle warpgroups). Predicted (before the run), against the new
//   default: the old one ("C1 BN128 S2 persistent tma-o") 0.94-0.975x at 8,32,2048,64 and 0.93-0.97x at
//   4,32,4096,64; Long64 0.96-0.995x and 0.975-1.00x; and on the fa-grid against cuDNN (graph replay)
//   D=64 non-causal N = 2048 from 0.976x to 1.00-1.04x, N = 4096 from 0.969-0.982x to 1.00-1.05x, every
//   other cell within 1.5% of the tenth session's. Measured (two H200s, main 3717917, 2026-11-27; the
//   tunes on GPU 0 after the fa-grid, GPU 1 running tests): the old default 1.004x and 1.000x (fp16),
//   1.001x (bf16, 4096), above the bands; Long64 1.016x, 1.044x, 1.044x, above: own-tiles with O from
//   the accumulators runs level with one warpgroup and 2-4% under Long64, where with O by TMA it gained
//   1-2% (not yet explained; a profile pair would tell). On the fa-grid (graph replay) D=64 non-causal
//   stayed 0.972-0.973x cuDNN at N = 2048 and 4096 (store 20261127-163058-sweep-v9-fa-grid).
// Step 5 (c), taken on what (b)'s tunes measured: Long64 itself, O from the accumulators, is the D=64
//   non-causal default from Nq, Nk >= 2048 (kLongRows, kLongKeys; before (b): Nk >= 8192). Predicted
//   on the fa-grid against cuDNN (graph): N = 2048 0.972x -> 0.98-0.995x (still below), N = 4096 0.973x
//   -> 1.00-1.03x; N >= 8192 unchanged (the same kernel as before (b)). Measured (two H200s, main c28c72e,
//   store 20261127-163641-sweep-v9-fa-grid): N = 4096 1.020x / 1.021x (fp16 / bf16), N = 2048 0.990x / 0.991x,
//   both inside; N >= 8192 1.090-1.144x. The fa-grid: 26 of 48 cells >= 1.0x in device time on the H200, 24 of
//   48 on an H100 (20261127-164020-sweep-v9-fa-grid-h100: D=128 non-causal N >= 8192 681-687 TFLOP/s fp16,
//   699-707 bf16).
// Step 6, tuning candidates only (eleventh session, 2026-11-27, CPU: no GPU time then; (b) taken in step 6 (c), below).
//   (a) Why own-tiles cost Long64 2-4% (step 5 (b)), from the machine code (nvcc 13.0, cuobjdump 13.5): its key-
//   tile count comes from the thread index (wg_row0), so ptxas compiled the key loop as divergent: stage, parity
//   and the 12 wgmma descriptors on the vector pipes, 24 more R2UR, convergence barriers around the mbarrier
//   waits, 618 instructions a key tile against Long64's 598 (+4% executed), where three consumers at D=64 keep
//   the issue slots within 8-12% of the tensor and MUFU pipes' time (v9_notes, "Step 5 (b)'s own-tiles on
//   Long64: the machine code"). Change: OwnKeyTilesUniform, the warpgroup index broadcast from lane 0, so the
//   key loop is Long64's instruction for instruction; "C3 BN128 S2 persistent own-tiles uniform (non-causal)".
//   (b) Two Q buffers (TwoQBuffers): the next tile's Q loaded a tile ahead. Bottleneck: the D=128 default's
//   profile at 32,16,512,128 (store 20261127-135157) waits for Q at each tile's start in 4.6% of the consumer
//   warps' samples (Q is freed after the tile's last S and loaded, with the next K_0, V_0, K_1, only then); at
//   N=512 a tile has 4 key tiles. "C2 BN128 S2 persistent pp tma-o q2" (225 KB, one CTA per SM) and, at D=64,
//   "C1 BN128 S2 persistent tma-o q2" (89 KB, two CTAs per SM); 0 spills; the 232 kernels of main's tuning
//   build unchanged. Predicted (before any GPU run; lab tune against the default, fp16): (a) 1.01-1.03x at
//   8,32,2048,64 and 1.005-1.025x at 4,32,4096,64 (the old own-tiles 0.97-0.995x and 0.945-0.97x beside it),
//   0.94-0.98x / 0.92-0.96x at N = 512 / 1024; (b) D=128 1.02-1.05x at 32,16,512,128 (causal 1.02-1.07x),
//   1.01-1.03x at 16,16,1024,128 (causal 1.01-1.04x), 0.99-1.01x at 2,16,8192,128; D=64 1.00-1.02x at N = 512
//   (causal 1.00-1.03x), 0.99-1.01x from N = 2048. The call: benchmarks/v9_step6_gpu.sh.
// Step 6 measured (twelfth session, one H200, e1fc68c; 11 tunes, 10 of 19 predictions inside, 4 above, 5
//   below): (b) two Q buffers 1.047x / 1.065x (causal) the D=128 default at 32,16,512,128, 1.033x / 1.023x at
//   16,16,1024,128, 1.009x at 2,16,8192,128; 1.065x / 1.039x D=64's at N = 512 / 1024 non-causal, level causal
//   (0.995x, 1.000x); (a) warp-uniform own-tiles level with Long64 (1.003x, 1.008x: the divergent loop was the
//   loss, the ragged-block gain did not appear). Step 6 (c), taken (aa5fe81): two Q buffers are the D=128 default
//   in both masks and D=64's non-causal one below Nq, Nk >= 2048 (lab_forward_v9 below). Predicted on the fa-grid
//   (cuDNN's time / v9's, graph, H200): about 36 of 48 cells >= 1.0x, every D=128 cell. Measured (one H200,
//   `20261127-182156-sweep-v9-fa-grid`): 36 of 48, all 24 D=128 cells (1.012-1.181x), each inside its band but
//   D=64 non-causal N = 512 fp16 (1.016x, band 1.02-1.05); one H100 (`*-182545-sweep-v9-fa-grid-h100`): 32 of 48,
//   and D=128 non-causal N >= 8192 at 695-701 TFLOP/s fp16, 716-723 bf16 (the 690 target met in both dtypes).
// Step 7, the D=64 causal gap (twelfth session; v9_notes "Step 7"), three candidates measured, none taken:
//   (a) the diagonal tile at half width (its masked half skipped: 10% of the work at N = 512, predicted 1.03-
//   1.08x) ran 0.75-0.88x, its non-causal control 0.80x: a wgmma shape chosen at run time made ptxas serialize
//   every product (C7511); withdrawn. (b) 64-key tiles ("C1 BN64 S2/S4 persistent tma-o"): 0.970-0.975x at N =
//   512 causal, 0.886x at 2048 (predicted 0.97-1.05 / 0.93-1.01): the key tile's fixed costs, not the masked
//   work, set the causal short-N time. (c) two Q buffers on Long64: 1.008x / 1.012x at 8,32,2048,64, 0.978-0.988x
//   from 4096 (predicted 1.01-1.03 / 1.00-1.02).
// Step 8, candidates only (twelfth session, CPU; v9_notes "Step 8"): cuDNN's own D=64 forward, profiled (a
//   producer and two consumer warpgroups in ping-pong, one CTA per SM, O by TMA, no wgmma in flight across the
//   softmax), as "C2 BN128 S2 persistent pp tma-o" and "... pp tma-o q2" at D=64. Predicted against the causal
//   default: 0.95-1.00x and 0.98-1.04x at N = 512, 0.96-1.02x (q2) at 2048. The call: benchmarks/v9_step8_gpu.sh.
//   Measured (thirteenth session, one H200, 75ad6ce; 11 of 12 inside): q2 1.016x / 1.019x (fp16 / bf16) at N = 512
//   causal, 1.000x at 1024, 0.975x at 2048, 0.964x at 4096; without q2 0.94-0.965x. Not taken (>= 1.0 only at
//   N = 512): at D = 64 a warpgroup's two products are shorter than its softmax, and the turns cost more than
//   they hide as the key loop grows.
// Step 9 (thirteenth session; v9_notes "Step 9"): the next tile's S_0 issued under this tile's epilogue
//   (fwd_wgmma.cuh's NextS0UnderEpilogue), "C1 BN128 S2 persistent tma-o next-s0" and "... tma-o q2 next-s0".
//   Attacks S_0's bubble, once per 64-row block (2.5 key tiles a block at N = 512 causal). Predicted 1.01-1.05x
//   at N = 512 causal; measured (one H200, 1216b6c) 0.969-1.004x causal, 0.95-0.98x non-causal: 12 of 14 below.
//   Not taken: the other CTA on the SM already fills that bubble.
// Step 10 (thirteenth session; v9_notes "Step 10"): Long64 (three consumers, O from the accumulators) is the
//   causal D=64 default from Nq, Nk >= kLongCausal = 8192 (lab_forward_v9 below), and "C3 BN128 S2 persistent
//   (causal)" the same kernel at any N. Attacks the D=64 causal cells at N >= 8192 (H100 0.990-1.003x cuDNN),
//   where the non-causal ones run Long64 at 1.08-1.12x. Predicted 1.04-1.09x the old default at 8192, 1.03-1.08x
//   at 16384. Measured (one H200, 782f969): 1.022x / 1.023x (fp16 / bf16) at 8192 (above the band's lower end's
//   inverse: less than predicted), 1.056x at 16384; 0.981x at 4096 and 0.870x at 2048 (so the rule starts at
//   8192). Against cuDNN (graph, same call, `20261127-211319-sweep-v9-d64-causal-long`): D=64 causal 1.018x /
//   1.017x at 8192, 1.046x / 1.037x at 16384.
// Step 11, candidates only (thirteenth session, CPU; v9_notes "Step 11"): a warpgroup's last key tile's softmax
//   and P V at half width where its second half is masked whole (fwd_wgmma.cuh's HalfLastKeyTile: the causal
//   diagonal of every other 64-row block, 10% of the key-tile work at N = 512), the choice made once per tile
//   with no product in flight (step 7 (a) chose it per key tile and ptxas serialized the kernel); S stays the
//   full product. "C1 BN128 S2 persistent tma-o half-softmax", "... tma-o q2 half-softmax", "C2 BN128 S2
//   persistent pp tma-o q2 half-softmax": 0 spills, no C75xx notice, every existing kernel SASS-identical.
//   Predicted 1.02-1.05x the default at 32,32,512,64 causal down to 1.00-1.012x at 4096; 1.00-1.04x at
//   32,16,512,128 causal; the non-causal controls 0.99-1.01x. Measured (one H100, e982121): 0.946x at N = 512
//   causal, 0.876x at 1024, 0.899x at D=128 N = 512 causal; controls 0.986x, 0.991x (1 of 5 inside). The cause,
//   from ncu: the stall "no instructions" 1.4% -> 15.9% of the samples, the two CTAs on an SM running
//   different copies of the key loop (4,616 instructions a function against 2,392): instruction-cache misses.
// Step 11 (b) (fourteenth session, CPU; v9_notes "Step 11 (b)"): the same three candidates with one key loop
//   and the half tile's last step peeled off it (2,872 instructions; the key loop 666 against the default's
//   667). 0 spills, no C75xx, every existing kernel SASS-identical. Predicted 1.00-1.035x at 32,32,512,64
//   causal, 1.00-1.02x at 1024, 0.995-1.012x at 2048; 1.00-1.04x at 32,16,512,128 causal; the control 0.99-1.01x.
//   Measured (one H100, f802207): 1.001x, 1.009x, 1.004x at N = 512, 1024, 2048 causal (every CI spans 1.0);
//   the control 0.999x; D=128 0.991x (below). ncu: the stall "no instructions" 2.4% of the samples (step 11 (a)
//   15.9%), instructions -4.0%, cycles -0.3%: the saved work is mostly off the critical path. Not taken yet: as
//   the D=64 causal default it needs the fa-grid and the default's GQA cases (v9_notes "Step 11 (b) measured").
// Step 11 (b) taken (fifteenth session): "C1 BN128 S2 persistent tma-o half-softmax" (Default64OTmaHalf) is the
//   D=64 causal default below kLongCausal (lab_forward_v9 below). Attacks the D=64 causal cells at N <= 4096
//   (H100 0.942-0.991x cuDNN, graph). Predicted on the H100 fa-grid: those cells 1.00-1.01x their last grid's,
//   none of them falling, every other cell unchanged (the same kernels).
//   Measured (one H100, 8292bf1, `20261128-010113-sweep-v9-fa-grid-h100`): those cells 1.004-1.017x (above the
//   band at N = 512, 1024), the unchanged kernels 0.994-1.013x; 35 of 48 cells >= cuDNN (graph).
// Step 12 (fifteenth session; v9_notes "Step 12"): the softmax's row max as a tree (fwd_wgmma.cuh's TreeRowMax:
//   5 dependent FMNMX a row where the running max made a chain of 17) and the mask as one compare an element
//   against a per-row limit (MasksByRowLimit: 160 fewer instructions a function), tuning candidates on the D=64
//   defaults and the D=128 one. Attacks the softmax's path from S to P V at D=64 causal short N ("wait" 26.7%
//   of v9's samples against cuDNN's 18.2%; the mask line 5.2%). Predicted 1.00-1.04x (both) at N = 512 down to
//   1.00-1.02x at 4096. Measured (one H100, 1d44cf4; 11 of 18 inside): both 1.012x, 1.010x, 1.014x, 1.016x at
//   N = 512, 1024, 2048, 4096 causal (each CI95 above 1.0); the tree alone at D=128 0.990x at N = 8192, at D=64
//   non-causal level. Taken (c194363): both are the D=64 causal default below kLongCausal (lab_forward_v9
//   below). The H100 fa-grid (`20261128-013911-sweep-v9-fa-grid-h100`): 37 of 48 cells >= cuDNN (graph),
//   D=64 causal 0.965x / 0.969x at 512 (0.957 / 0.955 before) to 0.992x / 1.009x at 4096.
// Step 13, a candidate (fifteenth session, CPU; v9_notes "Step 13"): FlashAttention-3's 176-key tile at D=128
//   non-causal, "C2 BN176 S2 persistent pp (non-causal)" (m64n176 S, 11 P V k-steps; 208 KB of Q and two K/V
//   stages, so O from the accumulators and one Q buffer). Attacks the per-key-tile path ping-pong does not hide at
//   N = 8192 (the tensor pipe about 70% busy at 690 TFLOP/s): 4.77 instructions a key against 5.19, per-tile
//   costs paid 27% less often. Predicted 0.995-1.035x the default at N = 8192 and 16384, 0.95-1.01x at 1024.
//   (c): D=64 causal's default (half tile, tree, row limit) with two Q buffers, one warpgroup and in ping-pong
//   (each of the two 1.016x the step-11 (b) default at N = 512 without those changes); predicted 0.995-1.03x and
//   0.99-1.03x at N = 512, ping-pong falling to 0.94-0.99x at 4096. The call: benchmarks/v9_step13_gpu.sh.
//   Measured (one H100, ff95585; 11 of 15 inside, 1 above, 3 below): the 176-key tile 0.994x, 0.996x (bf16) at
//   N = 8192 and 0.999x at 16384, 0.974x at 4096, 0.913x at 1024: not taken. Its ncu run (`lab profile
//   --candidate`, 20261128-033755-...-cand1) against the default's: 2.7% fewer SM active cycles and the tensor pipe
//   80.3% active against 77.3%, but O stored from the accumulators (uncoalesced-global: 50% of its sectors
//   excessive) where the default stores O by TMA. Long64 with two Q buffers 1.010x at 2048 and 1.001x at 3072
//   (the rule asked >= 1.005 at both): not taken. (c): ping-pong 1.032x at N = 512 (CI95 1.015-1.047), 1.003x at
//   1024, 0.981x at 2048, 0.952x at 4096; one warpgroup with two Q buffers 0.988-1.006x. Taken (9d12285): ping-pong
//   is the D=64 causal default below kShortCausal = 1024. The H100 fa-grid (`20261128-034923-sweep-v9-fa-grid-h100`):
//   38 of 48 cells >= cuDNN (graph), 48 of 48 (events); D=64 causal N = 512 1.000x / 1.001x (0.965 / 0.969 before).
// Step 14, a candidate (sixteenth session, CPU; v9_notes "Step 14"): the 176-key tile with O stored by TMA through
//   the tile's last V stage (fwd_wgmma.cuh's OInLastV, FlashAttention-3's O over V), "C2 BN176 S2 persistent pp
//   o-in-v (non-causal)". Attacks what step 13's ncu run found: O stored from the accumulators (uncoalesced-global,
//   50% of its sectors excessive) took back the key loop's 2.7% fewer cycles. Predicted 1.00-1.02x the default at
//   N = 8192 and 16384, 0.98-1.00x at 4096. Measured (one H100, 0fcf6ae; float64 check passed): 1.026x at 2,16,8192,128
//   fp16 (690.6 TFLOP/s against 673.4) and bf16, 1.029x at 1,16,16384,128 fp16: above the band. Again (one H100,
//   f5e8e29, 7 of 7 predictions inside): 1.024x at 8192 fp16, 1.028x at 16384 bf16, 0.996x / 0.992x at 4096, 0.978x
//   at 2048, 0.940x at 1024; memcheck, racecheck and synccheck clean; its ncu run (20261128-055455-...-cand2) has no
//   uncoalesced-global finding and 1.9% fewer SM active cycles than step 13's. Taken (21a5fac): the D=128
//   non-causal default from Nq, Nk >= kLong176 = 8192. The H100 fa-grid (`20261128-060216-sweep-v9-fa-grid-h100`):
//   40 of 48 cells >= cuDNN (graph), 47 of 48 (events); D=128 non-causal 8192 fp16 697 TFLOP/s (graph; 684 the
//   grid before, the other kernels' rates 0.988x theirs there), 16384 707; against cuDNN 1.051x / 1.053x and
//   1.095x / 1.076x (1.029x / 1.026x and 1.045x / 1.079x before).
// Step 15, candidates (seventeenth session; v9_notes "Step 15"): D=64 with two consumer warpgroups without turns (BM =
//   128, one CTA per SM, O by TMA, two Q buffers), plain and with the causal default's changes. Attacks L2 traffic: one
//   warpgroup a CTA reads each K/V tile once per 64 rows. Predicted 0.97-1.03x at N = 1024, 0.98-1.03x at 2048.
//   Measured (one H100, 23b8862; 5 of 11 inside, 6 below): 0.958-0.963x at 1024, 0.949x at 2048, 0.911x at 4096
//   non-causal; causal 1.006x / 0.999x at 1024 (plain), the lean twin 0.93-0.98x. Not taken. Its ncu run beside the
//   default's (one H200, 20261128-064529 and -064553-...-cand8): the default's L2 at 27% of peak (the estimate was a
//   unit error); the candidate halves the reads and loses 4.7% SM active cycles, its two warpgroups starting and
//   ending each tile together where two CTAs drift apart.
// Step 16, candidates (seventeenth session; v9_notes "Step 16"): a quarter or an eighth of the D=64 softmax's exp2 on
//   the FMA pipe (an ExpOnFmaShare wrapper and common.cuh's lab_exp2_fma, FlashAttention-4's software exp2; both
//   removed after the run, 22ee708 has them). Attacks the exp2 lines' 24% of the default's samples, stalled on
//   "wait" and the SFU's queue (mio_throttle). Predicted 0.98-1.03x at 16,32,1024,64. Measured (one H200, 1d656d7; 0 of 3 inside): a quarter 0.959x causal and 0.892x non-causal, an
//   eighth 0.971x causal. Not taken: the instructions it adds cost the issue slots that are the limit.
// Step 17, candidates (seventeenth session, CPU; v9_notes "Step 17"): P's row sums by the tensor cores at D=64
//   (fwd_wgmma.cuh's RowSumByMma: P V as m64n72 over V and a tile of ones), on the causal defaults below 8192 (one
//   warpgroup, and ping-pong below 1024), the non-causal one below 2048 and three consumers. Attacks the softmax's
//   issue slots (step 16: about seven instructions added for each exp2 moved off the SFU cost 3-11%): 64 FADD a
//   thread a key tile go. Predicted 1.00-1.05x at N = 1024 and 2048, 1.00-1.04x at 512 in ping-pong
//   (benchmarks/v9_step17_gpu.sh). Measured (one H100, 567c2ab; 4 of 15 inside): one warpgroup 0.94-0.98x at 1024-4096
//   in both masks (retired); three consumers 1.016x / 1.019x at 8,32,2048,64 and 1.013x at 8192 fp16. The gate failed
//   the LSE at 512 causal bf16 (0.0017 against 4.7e-4: sums of bf16 P over few keys), so RowSumByMma now applies
//   without the LSE only; the LSE instantiation sums the fp32 P (fwd_body's kSumMma).
// Step 17 (b) (eighteenth session; v9_notes "Step 17 (b)"): three consumers' row sums by the tensor cores as the D=64
//   non-causal default from Nq, Nk >= kLongRows, by a rule written before the call (>= 1.005x at every tuned shape
//   from 2048 to 16384 in both dtypes). Predicted 1.005-1.03x. Measured (one H100, 8784e02; 5 of 5 inside): 1.014x /
//   1.014x at 4096, 1.011x at 8192 bf16, 1.009x / 1.011x at 16384; the float64 gate on both instantiations passed.
//   Taken: Long64SumMma is that default.
//   The H100 fa-grid after it (`20261128-090024-sweep-v9-fa-grid-h100`): 42 of 48 cells >= cuDNN (graph), 48 of 48
//   (events); D=64 non-causal 2048 1.008x / 1.014x (0.987x / 0.989x before).
// Still to come (issue 28; that grid, graph, 42 of 48): D=64 non-causal N = 1024 (0.993x / 0.996x), D=64 causal 1024
//   (0.986x / 0.984x), D=64 causal 512 bf16 (0.996x), D=128 causal 512 bf16 (0.996x).
// Step 18 (nineteenth session; v9_notes "Step 18"): the D=64 causal ping-pong (step 13 (c)) below kShortCausal = 2048
//   (was 1024), so at N = 1024 too. Bottleneck it attacks: energy, not cycles. Under ncu (each launch from an idle GPU)
//   v9's one-warpgroup kernel and cuDNN's take the same SM cycles at 16,32,1024,64 (eighteenth session); run back to
//   back for 3 s (benchmarks/clock_probe.py, one H200, 61a532e) both sit at the power cap (NVML: sw_power_cap in 93-100%
//   of samples, 690 W) and v9 holds 1680-1725 MHz against cuDNN's 1770-1815, using 163 mJ a call against 157 (+4%),
//   236 us against 226. The ping-pong (BM = 128) does the same work on 152 mJ at 1845-1860 MHz: 220 us, ahead of cuDNN
//   (b6a7673; bf16 213 against 215, 39b9c56). Predicted (before the grid): the fa-grid's D=64 causal 1024 cells from
//   0.986x / 0.984x (H100, graph) to 1.00-1.02x; 512 and 2048 unchanged. Measured (one H200, 6b06dcd; gate 65 passed,
//   racecheck/synccheck 2, GQA 10): the H200 fa-grid `20261128-101754-sweep-v9-fa-grid-h200`, graph 45 of 48 >= cuDNN,
//   events 48 of 48; D=64 causal 1024 0.991x / 0.991x (missed: the grid's graph timer ran these cells at 1980 MHz, not
//   at the cap, where the two shapes are level), D=64 non-causal 1024 fp16 0.998x. Still to come (issue 28): those
//   three cells, and the H100 grid.
// Step 19 (twentieth session; v9_notes "Step 19"): D=64 causal from kLongCausal on the dynamic, longest-first walk
//   (tile_scheduler.cuh's LongestFirst; its tile counter in the forward workspace, common.cuh). Bottleneck it attacks:
//   the static walk's last round. Its units are equal, but their count is rarely a multiple of the grid, so the
//   busiest CTA has up to 5.5% more work than the mean (the CPU walk: 1.056x at 2,32,8192,64 causal on Long64's 132
//   CTAs). Evidence: with 33 heads instead of 32 (whole rounds) v9 took 1.001-1.008x the time of 32 heads at causal
//   1024-2048 where cuDNN took 1.025-1.029x (sweep `20261128-115643-sweep-v9-quantization`, one H200, graph).
//   Predicted (written before the tunes): 1.015-1.05x at 1,32,16384,64 causal. Measured (`lab tune`, one H200,
//   e7600e3): 1.040x (CI95 1.037-1.042). On the H200 fa-grid (`20261128-123359-sweep-v9-fa-grid-h200`, 66f759a;
//   gate 32 passed) the D=64 causal cells at 8192 and 16384 went from 1.021-1.064x cuDNN to 1.056-1.109x (graph;
//   predicted 1.05-1.10x), graph 45 of 48 >= cuDNN, events 48 of 48. Under the short causal kernels the walk lost in
//   `lab tune` (0.95-0.99x) and stays a candidate: there it won in CUDA-graph replay at 1024 (1.033x D=64, 1.042x
//   D=128; benchmarks/graph_probe.py, not a checked time) and lost at 512 (0.948x). The counter's memset and the
//   workspace's allocation cost a call a few microseconds that call latency shows (v9_notes "Step 19").
// Step 19 (b) (twentieth session): the walk's counter from common.cuh's zeroed counters (kept by the lab per stream;
//   the kernel's last CTA returns them to zero), so no memset and no workspace a call (a graph capture, where the lab
//   gives none, keeps them). Predicted (before any GPU run): the walk under the short causal kernels from 0.95-0.99x
//   to 1.01-1.035x the static walk at 16,32,1024,64 and 1.01-1.045x at 16,16,1024,128 in `lab tune`; still below at
//   512 (0.94-0.99x). Measured (`lab tune`, one H200, e45f135, benchmarks/v9_step19c_gpu.sh; the counters' test, 27
//   float64 cases and memcheck/racecheck passed): D=64 1.011x fp16 and bf16 at 1024 (CI95 0.998-1.017, 1.004-1.019),
//   0.971x at 512, 1.000x at 2048 and 1.002x at 4096 (one warpgroup); D=128 0.983x at 1024 and 0.989x at 2048,
//   missed. By graph replay (`lab tune --timing graph`, checked, its memset node kept): 1.012x at D=64 1024, 0.972x
//   at D=128 1024 (graph_probe's unchecked 1.042x did not hold with L2 flushed and inputs rotated).
// Step 19 (c) (twenty-first session): the D=64 causal default on the longest-first walk from kLongestFirstCausal =
//   1024 (was 8192), under each range's kernel (the ping-pong below 2048, one warpgroup to 8192), with step 19 (b)'s
//   zeroed counters. Bottleneck it attacks: step 19's last round at 1024-8192. Evidence: step 19 (b)'s tunes above.
//   Predicted (before the grid): the H200 fa-grid's D=64 causal 1024 cells from 0.989x / 0.995x cuDNN (graph) to
//   1.00-1.02x; 2048 and 4096 within 1% of the last grid; 512 and D=128 unchanged (their kernels are). Measured
//   (one H200, f83cb15; gate 35 passed, memcheck and racecheck clean on 10 launches, GQA checked; the H200 fa-grid
//   `20261128-141950-sweep-v9-fa-grid-h200`): D=64 causal 1024 0.993x / 0.992x (fp16 / bf16, graph): v9 0.3% faster
//   than in the last grid, inside the spread between grids, missed; 2048 0.996x / 1.007x; graph 44 of 48 >= cuDNN,
//   events 47 of 48.
// Step 20 (twenty-first session; v9_notes "Step 20"): when the dynamic walk takes its next index. Bottleneck it
//   attacks: step 19's index is taken a tile ahead, as the tile's Q loads, and needed once the tile's K/V loads are
//   issued, so on short tiles the atomic's round trip delays the next Q (512 causal 0.97x the static walk back to
//   back, no memset), while a CTA holding its next index for a whole tile holds work an idle CTA would take (the CPU
//   walk, tests/test_tile_scheduler.py: 16,32,1024,64 causal ends 1.0% over the mean a tile ahead, 0.3% taken as the
//   CTA frees up; 16,16,1024,128 3.1% and 1.7%). Candidates: two tiles ahead (LongestFirstAhead) and late, with the
//   tile's third last K/V stage (LongestFirstLate), on both ping-pongs. Predicted (before the run; against the
//   one-ahead walk): late 1.00-1.015x at 16,32,1024,64, 1.00-1.02x at 16,16,1024,128; two ahead 1.00-1.03x at 512,
//   0.97-1.00x at 16,16,1024,128 (benchmarks/v9_step20_gpu.sh has them all). Measured (`lab tune`, call latency, one
//   H200, 4261339; gate 30 and memcheck/racecheck 8 passed), against the one-ahead walk from each tune's medians: two
//   ahead 1.004x at 512 (inside), 0.997x / 1.000x at 16,32,1024,64 fp16 / bf16, 0.975x at 16,16,1024,128 (inside);
//   late 0.992x at 512, 1.002x / 0.996x at 1024 D=64 (judged against the default, the one-ahead walk: 0.996x and
//   0.997x, below 1.00-1.015), 0.995x at D=128 (below). Neither taken; both retired. The same tunes put step 19 (c)'s
//   default 1.018x / 1.011x ahead of the static ping-pong at 16,32,1024,64 fp16 / bf16.
// Step 19 (d) (twenty-first session; v9_notes "Step 19 (d)"): the walk only where it measured a gain: the causal
//   ping-pong in [1024, 2048) and three consumers from 8192; the one-warpgroup kernel in [2048, 8192) back on the
//   static walk (1.000x and 1.002x in `lab tune`; 2048 fp16 0.996x cuDNN in the grid after 19 (c), 1.002x before).
//   And a call captured into a CUDA graph takes counters of its own from the lab's capture slab (kernels/binding.cpp),
//   so the graph has no memset node before the kernel. Predicted (before the grid; graph timing, v9 / cuDNN): D=64 causal
//   1024 from 0.993x / 0.992x to 0.997-1.01x (the memset node's microsecond or so of 210); causal 2048 and 4096
//   within 1% of the grid before step 19 (c) (`20261128-123359`); 8192 and 16384 within 1% of the last grid.
//   Measured (one H200, 1b2bca5 and c9bf861; gate 62 passed; the counters' test with two captured graphs of the
//   default and of two candidates, replayed in turn against float64, their dot files without a memset node: 3 passed;
//   memcheck clean): the H200 fa-grid `20261128-144730-sweep-v9-fa-grid-h200`, graph 46 of 48 >= cuDNN, events 48 of
//   48. D=64 causal 1024 0.996x / 0.9985x (fp16 / bf16; v9 1.1-1.3% faster than in the step-19 grid, cuDNN 0.3-1.0%
//   faster too): bf16 inside, fp16 0.001 below. Causal 2048 1.005x / 1.004x and 4096 inside. At 8192 and 16384 v9's
//   times held within 0.5% while cuDNN's came 1-2.6% faster: three of four cells' ratios fell 1.5-3%, outside the 1%.
//   Still to come (issue 28): D=64 causal 1024, by 0.2-0.4%; the H100 grid.
// Step 21 (twenty-second session; v9_notes "Step 21"): the one-warpgroup kernel in [2048, 8192) back on the walk.
//   Evidence: `lab tune --against cudnn --timing graph` at 8,32,2048,64 causal (bffff09): the walk's candidate ran
//   1.005x (fp16, CI95 1.003-1.006) and 1.0085x (bf16, 1.007-1.010) the static default by device time; by call latency
//   step 19 (b) had it level. The default against cuDNN there: 1.000x, level. Predicted (before the run; graph timing):
//   the static walk's candidate 0.990-0.997x the new default at 8,32,2048,64 and 0.99-1.00x at 4,32,4096,64; against
//   cuDNN 1.002-1.01x at 2048, the grid's 2048 and 4096 causal cells up by 0.3-0.9%, the other cells within the spread.
//   Measured (one H200, 57630a4; gate 37 passed with the counters' test and memcheck): the static candidate 0.998x
//   (fp16, above) and 0.995x (bf16, inside) the new default at 2048, 0.995x at 4096 (inside); against cuDNN 1.003x /
//   1.008x at 2048 (inside) and 1.021x at 4096. The H200 fa-grid
//   `20261128-164557-sweep-v9-fa-grid-h200`: graph 47 of 48, events 48 of 48; causal 2048 +0.6% / +0.5% and 4096
//   +1.0% / +1.1% (fp16 / bf16) against `20261128-162949` (4096 bf16 above the 0.9%). Below: D=64 causal 1024 bf16,
//   0.9972x, where v9 and cuDNN are level (benchmarks/pairing_probe.py: 1.0001x interleaved, block pairs 0.997-1.002x).
// Step 22 (twenty-third session; v9_notes "Step 22"): the walk hands the consumers their tile. What changed: on the
//   walking ping-pong and one-warpgroup kernels (the D=64 causal defaults from 1024 below kLongCausal), the producer
//   thread writes the tile it loads (head << 32 | query block) into the Q buffer's word, where it wrote the list index,
//   and the consumers read it instead of computing causal_lpt (fwd_wgmma.cuh's HandsTile). Bottleneck it attacks, with
//   evidence: ncu of the default at 16,32,1024,64 causal fp16 (H200, run 20261128-180404, shipped) puts 2.8% of all
//   warp samples on causal_lpt's divisions by run-time values in the consumers, at each tile's start, the kernel level
//   with cuDNN's (206.2 us both, run 20261128-180429). Measured as a candidate (one H200, 3ca115f; gate 32 passed,
//   memcheck and racecheck clean; `lab tune --timing graph`, 60 paired rounds, against the index-reading default):
//   1.029x fp16 (CI95 1.027-1.030) and 1.030x bf16 at 16,32,1024,64 causal (predicted 1.000-1.008x: above); 1.006x on
//   the one-warpgroup kernel at 8,32,2048,64 (with L2 priorities, level on their own). The same call's other candidate,
//   L2 eviction priorities (K and V evict-last, Q and O evict-first), ran 1.002x / 1.001x, and the lab's L2 flush does
//   not evict all evict-last lines (benchmarks/l2_flush_probe.py): retired (3ca115f has it). Taken first on every
//   walking kernel (260f22d; gate 65, memcheck and racecheck, GQA 10 passed): `lab tune --against cudnn --timing graph`
//   1.029x / 1.030x cuDNN at 16,32,1024,64 causal, the static ping-pong 0.964x / 0.962x the default (predicted
//   0.950-0.975x: inside); the H200 fa-grid `20261128-182637` graph 48 of 48 >= cuDNN, events 48 of 48, but D=64 causal
//   8192 and 16384 2.0-2.5% slower than the grid before, beyond the machine's drift (unchanged kernels 0.2-1.2%). Side
//   by side with the walk it replaced (a workspace rung of 6e522e3's kernel, `20261128-183531`, graph, three passes,
//   fp16 / bf16): 1.028x / 1.030x at 1024, 1.004x / 1.005x at 2048, 1.001x / 1.000x at 4096, but 0.979x / 0.981x at
//   8192 and 0.976x / 0.972x at 16384, on three consumers. So three consumers read the index again (8192 and 16384:
//   predicted 0.995-1.005x, missed; why the hand-off costs there is not measured yet). Predicted for this default
//   (before its grid): D=64 causal 8192 and 16384 1.015-1.03x faster than in `20261128-182637`, every other cell within
//   the spread between grids (about 0.5% on one machine, 1% between machines), graph 48 of 48 >= cuDNN.
// Step 23 (twenty-fourth session; v9_notes "Step 23"): the static walk hands the consumers their tile too. What
//   changed: HandsTile (step 22) on tile_scheduler.cuh's Persistent walk: its producer thread takes each next step of
//   the walk and writes the tile into the Q buffer's word (a word per Q buffer, as the dynamic walk has, and its end
//   protocol: -1 and a plain arrival); the consumers read it instead of computing step_tile. Taken on the one-warpgroup
//   non-causal kernel below kLongRows, the causal ping-pong below 1024 and the D=128 ping-pong (both masks, non-causal
//   below kLong176); not on three consumers (step 22's loss there) nor on the 176-key kernel (no candidate yet).
//   Bottleneck it attacks, with evidence: `integer-division` (the lab's new analysis) names the static walk's
//   step_tile division (tile_scheduler.cuh:91, inlined into the consumers' advance()) in five shipped static-walk runs,
//   1.6-2.7% of all warp samples. Measured as candidates (one H200, d14e606; gate 30 passed, memcheck 4 clean; `lab
//   tune --timing graph`, 60 paired rounds, against the index-computing default): 1.014x at 16,32,1024,64 non-causal
//   fp16 (predicted 1.003-1.020x: inside), 1.027x at 32,32,512,64 causal fp16 (1.000-1.020x: above), 1.021x at
//   16,16,1024,128 causal fp16 (1.000-1.015x: above), 1.003x at 8,16,2048,128 non-causal bf16 (0.995-1.010x: inside).
//   The same tunes put the defaults against cuDNN at 0.998x (16,32,1024,64 non-causal, behind by its CI95), 1.019x,
//   1.097x and 1.013x. Predicted for the taken default: D=64 non-causal 512 and 1024 1.005-1.02x faster than in the
//   grid before (`20261128-184249`), D=64 causal 512 1.01-1.03x, D=128 below 8192 1.000-1.025x, D=128 causal 8192 and
//   16384 0.995-1.01x; the cells of unchanged kernels within the spread between grids; graph 48 of 48 >= cuDNN.
//   Measured (365249a; gate 35, racecheck and synccheck of the default, GQA 10 passed): the fa-grid `20261128-201334`
//   D=64 non-causal 512-1024 1.013-1.021x, D=64 causal 512 1.028x / 1.035x, D=128 causal 512-4096 1.011-1.027x faster
//   (inside or just above); D=128 non-causal 2048-4096 0.989-1.000x, missed low, but the unchanged 176-key kernel moved
//   as much (machine spread; a tune at 4,16,4096,128 had the index-computing kernel at 0.999x the handed one); graph
//   47 of 48 (D=64 causal 2048 fp16 0.9989x, level). There the walking ping-pong, handed, ran 1.008x / 1.006x the
//   one-warpgroup kernel, which ran 1.010x the ping-pong at 3072: kShortCausal moved to 2560. The 176-key kernel
//   handed ran 0.999x (retired). Final H200 fa-grid `20261128-203036` (d5e98fb): graph 48 of 48 >= cuDNN (min
//   1.0085x), events 48 of 48 (min 1.0138x), by CI95 89 of 96 rows ahead, 7 level, none behind.
#include "common.cuh"
#include "hopper/fwd_wgmma.cuh"

namespace v9 {

template <int D_, int BN_, int STAGES_, bool PINGPONG_ = false, int CONSUMERS_ = 2>
using Config = lab_hopper_fwd::Config<D_, BN_, STAGES_, PINGPONG_, CONSUMERS_>;
using lab_hopper_sched::OneTilePerCta;
using lab_hopper_sched::Persistent;
using lab_hopper_sched::LongestFirst;
// v6's configurations (benchmarks/v6_notes.md run 5), now persistent:
//                       D   BN  stages ping-pong consumer warpgroups
using Default64 = Config<64, 128, 2, false, 1>;     // BM = 64, two CTAs per SM
using Long64 = Config<64, 128, 2, false, 3>;        // BM = 192: non-causal, seqlen_k >= kLongKeys
using Default128 = Config<128, 128, 2, false, 2>;   // BM = 128, one CTA per SM (step 1's default)
// D=128: the two consumer warpgroups take turns at the tensor cores (ping-pong) on the persistent
// grid (steps 2 and 3; `lab tune`, H200, 2026-11-27: 1.041-1.072x Default128 non-causal, 1.067x
// causal at N=16384). The
// default launches this type, the tuning candidate "C2 BN128 S2 persistent pp" the same: one kernel.
using PingPong128 = Config<128, 128, 2, true, 2>;
// Step 4 (a), a tuning candidate only: one consumer warpgroup (BM = 64), two CTAs per SM, so one
// CTA's tile start (Q and the first K/V by TMA, S_0 and its softmax with nothing beside them) and
// its epilogue run under the other CTA's main loop, and N = 512 has twice the tiles. BN = 64: two
// CTAs of Q 16 KB + 2 stages x (K + V) 32 KB each + 1 KB = 81 KB fit the SM's 228 KB (BN = 128
// needs 145 KB a CTA; three stages of BN = 64, 113 KB, miss by 240 bytes with the per-CTA reserve).
using Short128 = Config<128, 64, 2, false, 1>;
static_assert(2 * (Short128::kSmemBytes + 1024) <= 228 * 1024, "Short128: two CTAs per SM");
// D=128's default from step 4 (b) to step 6 (c): PingPong128 with O stored through shared memory by TMA
// (fwd_wgmma.cuh's OByTma; `lab tune`, H100, 2026-11-27: 1.053-1.094x PingPong128 at N <= 1024,
// 1.012x at N = 8192); since step 6 (c) with two Q buffers (PingPong128OTmaQ2, below), this one the
// candidate "C2 BN128 S2 persistent pp tma-o". O's map has Q's dims, strides and alignment (box rows 64 <= BM), so every
// problem whose Q map encodes has an O map too: no input the register epilogue took is refused.
using PingPong128OTma = lab_hopper_fwd::OByTma<PingPong128>;
// D=64's causal default since step 4 (b) at D=64 (non-causal below kLongKeys until step 6 (c)): Default64
// with O stored by TMA (`lab tune`, H200, 2026-11-27: 1.013-1.077x Default64 at N <= 1024, never
// slower). The default launches this type, the candidate "C1 BN128 S2 persistent tma-o" the same.
// 73 + 8 KB a CTA, still two per SM. Long64 (three consumers, non-causal, Nk >= kLongKeys) keeps O
// from the accumulators: no run timed O by TMA on it.
using Default64OTma = lab_hopper_fwd::OByTma<Default64>;
static_assert(2 * (Default64OTma::kSmemBytes + 1024) <= 228 * 1024, "D=64 tma-o: two CTAs per SM");
// Step 5 (c), the D=64 non-causal default from Nq, Nk >= 2048 (eleventh session): Long64, O from the
// accumulators (before: from Nk >= 8192). `lab tune`, two H200s, 2026-11-27: 1.016x and 1.044x
// (fp16; bf16 1.044x) the one-warpgroup default at 8,32,2048,64 and 4,32,4096,64 (main 3717917; 1.020x
// and 1.041x at 0955fd7). Below Nq = 2048 the ragged block (1.125x the rows at N = 512, 1024) and the
// short key loop leave BM = 192 0.92-0.96x. Nq is bounded too: at Nq <= 64 (decode) two of the three
// warpgroups would idle beside one CTA per SM. Step 5 (b), a candidate: the same with each warpgroup
// computing only its own key tiles (OwnKeyTiles), the default for one run (3717917), 0.96-0.98x Long64.
using Long64Own = lab_hopper_fwd::OwnKeyTiles<Long64>;
constexpr int kLongKeys = 2048;
constexpr int kLongRows = 2048;
// Step 10 (thirteenth session; benchmarks/v9_notes.md, "Step 10"): Long64 is the D=64 causal default too
// from Nq, Nk >= kLongCausal. BM = 192 computes 3.1% more scores than BM = 64 causal at N = 8192 (2.3% at
// 16384; 9-11% at 2048-4096: every block's warpgroups compute its last row's key tiles), against a rate
// per score 1.07x the one-warpgroup kernel's at N = 4096 non-causal and more as the key loop grows.
constexpr int kLongCausal = 8192;
// Step 13 (c) (sixteenth session; v9_notes "Step 13 (c)"): ping-pong with two Q buffers and steps 11 (b)-12 is the
// D=64 causal default below kShortCausal: 1.032x the step-12 default at 32,32,512,64 (CI95 1.015-1.047), 1.003x
// at 16,32,1024,64 (below the rule's 1.005), 0.981x at 2048 (H100, ff95585). Step 18 (v9_notes "Step 18"): under the
// power cap (3 s of calls back to back, NVML's sw_power_cap in 93-100% of samples, H200) it runs 1.049x / 1.048x the
// one-warpgroup default at 16,32,1024,64 fp16 / bf16 and 1.03x at 8,32,2048,64 on 4.5% fewer joules a call; the rule
// moves to 2048, where it is >= 1.0 with the clock shared too. Step 23 (v9_notes "Step 23 taken"): with the tile
// handed to both kernels, the walking ping-pong ran 1.008x / 1.006x the one-warpgroup default at 8,32,2048,64 fp16 /
// bf16 (graph, H200); but the one-warpgroup kernel ran 1.010x the ping-pong at 5,32,3072,64 and the ping-pong 0.985x
// it at 4,32,4096,64 (fp16): the rule moves to 2560, between the two measured sides (not measured there).
constexpr int kShortCausal = 2560;
// Step 5, tuning candidates only (tenth session): three consumer warpgroups (BM = 192) at D=64 with O
// stored by TMA, both masks, and the same with each warpgroup computing only the key tiles its own
// rows see (fwd_wgmma.cuh's OwnKeyTiles: causal, warpgroup 0 of a block skips the key tiles past its
// rows; a ragged last block's warpgroups past nq compute one key tile). 89 + 24 KB a CTA, one per SM.
using Long64OTma = lab_hopper_fwd::OByTma<Long64>;
using Long64OTmaOwn = lab_hopper_fwd::OByTma<lab_hopper_fwd::OwnKeyTiles<Long64>>;
// Step 6 (eleventh session; benchmarks/v9_notes.md, "Step 6"). (a) Long64Own with its key-tile count
// warp-uniform (OwnKeyTilesUniform), a tuning candidate: Long64's key loop instruction for
// instruction, the ragged block's warpgroups past nq still idle; level with Long64 (1.003x, 1.008x).
// (b) Two Q buffers (TwoQBuffers): the next tile's Q loaded a tile ahead, on the two defaults that
// run short tiles: D=128 (193 + 32 = 225 KB, one CTA per SM) and D=64's one warpgroup (81 + 8 = 89
// KB, still two CTAs per SM). Step 6 (c) (twelfth session): the D=128 default in both masks and the
// D=64 non-causal default below kLongRows/kLongKeys (`lab tune`, one H200, 2026-11-27: 1.009-1.065x
// the D=128 default, 1.039x / 1.065x D=64's at N = 1024 / 512); D=64 causal keeps Default64OTma (q2
// 0.995x / 1.000x, CI95 across 1.0). The default launches these types, the candidates "C2 BN128 S2
// persistent pp tma-o q2" and "C1 BN128 S2 persistent tma-o q2" the same: one kernel each.
using Long64OwnU = lab_hopper_fwd::OwnKeyTilesUniform<Long64>;
using PingPong128OTmaQ2 = lab_hopper_fwd::TwoQBuffers<PingPong128OTma>;
using Default64OTmaQ2 = lab_hopper_fwd::TwoQBuffers<Default64OTma>;
static_assert(PingPong128OTmaQ2::kSmemBytes + 1024 <= 228 * 1024, "D=128 q2: one CTA per SM");
static_assert(2 * (Default64OTmaQ2::kSmemBytes + 1024) <= 228 * 1024, "D=64 q2: two CTAs per SM");
// Step 7, tuning candidates only (twelfth session; benchmarks/v9_notes.md, "Step 7"): D=64 with 64-key
// tiles, so the causal diagonal tile wastes half as much (a 64-row block's last 128-key tile is half
// masked in every other block: 1 / (N/64 + 2) of the key-tile work, 10% at N = 512), at twice the key
// tiles' fixed costs; two stages (48 KB a CTA) and four (80 KB), O by TMA, two CTAs per SM as the
// default. (Computing only the diagonal tile at half width, a wgmma shape chosen at run time, made ptxas
// serialize every wgmma of the kernel: 0.75-0.88x, v9_notes.)
using Short64OTma = lab_hopper_fwd::OByTma<Config<64, 64, 2, false, 1>>;
using Short64S4OTma = lab_hopper_fwd::OByTma<Config<64, 64, 4, false, 1>>;
static_assert(2 * (Short64S4OTma::kSmemBytes + 1024) <= 228 * 1024, "D=64 BN=64 S4: two CTAs per SM");
// Step 7 (c), a tuning candidate: two Q buffers on Long64 (the D=64 non-causal default from Nq, Nk >=
// 2048, one CTA per SM like D=128, where two Q buffers gained 1.009-1.065x): 88 + 24 = 112 KB, 128
// registers, 0 spills, no C75xx notice.
using Long64Q2 = lab_hopper_fwd::TwoQBuffers<Long64>;
static_assert(Long64Q2::kSmemBytes + 1024 <= 228 * 1024, "Long64 q2: one CTA per SM");
// Step 8, tuning candidates only (twelfth session; benchmarks/v9_notes.md, "Step 8"): D=64 as cuDNN runs
// it (its sm90 forward at 32,32,512,64, both masks: "64x128x64", a producer and two consumer warpgroups
// taking turns, one CTA per SM, O by TMA, 168 registers; tests/fixtures/ncu/sdpa-cudnn-fwd-d64*): ping-pong
// at D=64 (BM = 128) with O by TMA, and with two Q buffers. 168 registers, 0 spills, no C75xx notice.
using PingPong64OTma = lab_hopper_fwd::OByTma<Config<64, 128, 2, true, 2>>;
using PingPong64OTmaQ2 = lab_hopper_fwd::TwoQBuffers<PingPong64OTma>;
static_assert(PingPong64OTmaQ2::kSmemBytes + 1024 <= 228 * 1024, "D=64 pp q2: one CTA per SM");
// Step 9, tuning candidates (thirteenth session; benchmarks/v9_notes.md, "Step 9"): the next tile's S_0
// issued under this tile's epilogue (fwd_wgmma.cuh's NextS0UnderEpilogue) on the D=64 defaults, causal
// (Default64OTma) and non-causal below kLongRows (Default64OTmaQ2, its two Q buffers letting S_0 wait
// for no Q load).
using Default64OTmaNextS0 = lab_hopper_fwd::NextS0UnderEpilogue<Default64OTma>;
using Default64OTmaQ2NextS0 = lab_hopper_fwd::NextS0UnderEpilogue<Default64OTmaQ2>;
// Step 11, tuning candidates (thirteenth session; benchmarks/v9_notes.md, "Step 11"): a warpgroup's last key
// tile's softmax and P V at half width where its second half is masked whole (fwd_wgmma.cuh's
// HalfLastKeyTile, chosen once per tile), on the D=64 causal default, the D=64 non-causal one (its control)
// and the D=128 default.
using Default64OTmaHalf = lab_hopper_fwd::HalfLastKeyTile<Default64OTma>;
using Default64OTmaQ2Half = lab_hopper_fwd::HalfLastKeyTile<Default64OTmaQ2>;
using PingPong128OTmaQ2Half = lab_hopper_fwd::HalfLastKeyTile<PingPong128OTmaQ2>;
// Step 12, tuning candidates (fifteenth session; benchmarks/v9_notes.md, "Step 12"): the softmax's row max
// as a tree (fwd_wgmma.cuh's TreeRowMax) and the mask as one compare an element against a per-row limit
// (MasksByRowLimit), on the D=64 causal default below kLongCausal (each alone and both), the D=64
// non-causal default below kLongRows, and the D=128 default.
using Default64OTmaHalfTree = lab_hopper_fwd::TreeRowMax<Default64OTmaHalf>;
using Default64OTmaHalfRowLimit = lab_hopper_fwd::MasksByRowLimit<Default64OTmaHalf>;
using Default64OTmaHalfTreeRowLimit = lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<Default64OTmaHalf>>;
using Default64OTmaQ2Tree = lab_hopper_fwd::TreeRowMax<Default64OTmaQ2>;
using PingPong128OTmaQ2Tree = lab_hopper_fwd::TreeRowMax<PingPong128OTmaQ2>;
using PingPong128OTmaQ2TreeRowLimit = lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<PingPong128OTmaQ2>>;
// Step 13, a tuning candidate (fifteenth session; benchmarks/v9_notes.md, "Step 13"): FlashAttention-3's key tile
// at D=128 non-causal, 176 keys (m64n176 S, 11 P V k-steps), with ping-pong on the persistent grid. Q and two
// K/V stages take 208 KB, so O is stored from the accumulators and Q has one buffer.
using PingPong128Keys176 = Config<128, 176, 2, true, 2>;
// Step 14, a tuning candidate (sixteenth session; v9_notes "Step 14"): the same with O stored by TMA through the
// tile's last V stage (fwd_wgmma.cuh's OInLastV, FlashAttention-3's O over V), in the 208 KB it has.
using PingPong128Keys176OInV = lab_hopper_fwd::OInLastV<PingPong128Keys176>;
// Step 14 taken (seventeenth session; v9_notes "Step 14 taken"): it is the D=128 non-causal default from Nq, Nk >=
// kLong176: 1.024x / 1.026x (fp16 / bf16) the step-6 (c) default at 2,16,8192,128 and 1.029x / 1.028x at
// 1,16,16384,128, but 0.996x / 0.992x at 4,16,4096,128 and 0.978x at 2048 (H100, f5e8e29 and 0fcf6ae): the rule's
// ">= 1.005 at every measured shape from there on, both dtypes" holds from 8192.
constexpr int kLong176 = 8192;
// Step 13 (c), tuning candidates: the D=64 causal default's three changes (half tile, tree, row limit) with two Q
// buffers, one warpgroup (BM = 64) and in ping-pong (BM = 128, cuDNN's shape at D=64): each of the two ran 1.016x
// the step-11 (b) default at 32,32,512,64 causal in step 12's tune, without steps 11 (b) and 12 on them.
using Default64OTmaQ2Lean =
    lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<Default64OTmaQ2>>>;
using PingPong64OTmaQ2Lean =
    lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<PingPong64OTmaQ2>>>;
// Step 15, tuning candidates (seventeenth session; v9_notes "Step 15"): D=64 with two consumer warpgroups that do
// not take turns (BM = 128, one CTA per SM), O by TMA, two Q buffers; and the same with the D=64 causal default's
// changes (half tile, tree, row limit). Attacks L2: one warpgroup a CTA (BM = 64) reads each K/V tile once per 64
// rows, about 6.5 TB/s from L2 at 16,32,1024,64 non-causal (three quarters of what the H100's L2 gave in the
// profiles), and two rows of CTAs on an SM read the same tiles twice; a block of 128 rows reads them once. Ping-pong
// at BM = 128 (step 8) paid for its turns at D=64, where a warpgroup's products are no longer than its softmax.
using Pair64OTmaQ2 = lab_hopper_fwd::TwoQBuffers<lab_hopper_fwd::OByTma<Config<64, 128, 2, false, 2>>>;
using Pair64OTmaQ2Lean =
    lab_hopper_fwd::TreeRowMax<lab_hopper_fwd::MasksByRowLimit<lab_hopper_fwd::HalfLastKeyTile<Pair64OTmaQ2>>>;
static_assert(Pair64OTmaQ2::kSmemBytes + 1024 <= 228 * 1024, "D=64 pair q2: one CTA per SM");
// Step 17 (seventeenth session; v9_notes "Step 17"): P's row sums by the tensor cores (fwd_wgmma.cuh's RowSumByMma:
// P V as m64n72 over V and a tile of ones) on three consumers, the non-causal default from kLongRows since step 17 (b).
// Its one-warpgroup twins lost and were retired with their types (567c2ab has them).
using Long64SumMma = lab_hopper_fwd::RowSumByMma<Long64>;
// Step 22: the walking ping-pong and one-warpgroup kernels with the tile handed to the consumers (fwd_wgmma.cuh's
// HandsTile): the D=64 causal defaults from 1024 below kLongCausal.
using PingPong64Handed = lab_hopper_fwd::HandsTile<PingPong64OTmaQ2Lean>;
using Default64Handed = lab_hopper_fwd::HandsTile<Default64OTmaHalfTreeRowLimit>;
// Step 23: the static walk's defaults with the tile handed to the consumers (HandsTile on tile_scheduler.cuh's
// Persistent): D=64 non-causal below kLongRows, D=64 causal below 1024 (PingPong64Handed on the static walk), D=128
// (non-causal below kLong176).
using Default64OTmaQ2Handed = lab_hopper_fwd::HandsTile<Default64OTmaQ2>;
using PingPong128OTmaQ2Handed = lab_hopper_fwd::HandsTile<PingPong128OTmaQ2>;

// The LSE only when asked (a second instantiation: the default forward stores nothing more).
template <class C, bool CAUSAL, class Sched = Persistent>
const char* launch(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->lse != nullptr ? lab_hopper_fwd::launch<C, CAUSAL, true, Sched>(a, stream)
                           : lab_hopper_fwd::launch<C, CAUSAL, false, Sched>(a, stream);
}

#ifdef LAB_TUNING
// Candidates for `lab tune --variant v9`: the defaults' own kernels (so a default taken from the table runs
// the kernel that was timed) and the live candidates. Retired at step 13 (they lost their tunes, or a later
// step replaced them; each one's tunes are shipped under profiles/examples/ and benchmarks/v9_notes.md has
// them): v6's one CTA per tile (step 1), the step-3 register epilogues, BM = 64 at D = 128 (step 4), three
// consumers with O by TMA and own key tiles (steps 5-6), 64-key tiles with four stages (step 7), ping-pong at
// D = 64 without step 12 (step 8), the next tile's S_0 under the epilogue (step 9), the half-width last tile on
// its own (step 11) and step 12's singletons. Every candidate is 8 or 16 kernels of the tuning build (dtype x
// mask x LSE x GQA), which grew to 520 kernels and more than nine minutes of nvcc on the GPU machine: a call
// could no longer build it and time anything. Restore one from git (83bbec5 has the whole table) to retime it.
// Retired the session they were measured: step 15's two consumer warpgroups at D=64 (22ee708 has their entries; their
// types are kept above for a one-line return) and step 16's software exp2 (its wrapper and helper removed with it: a
// branch in the softmax's hot loop that no kernel takes; 22ee708 has them); step 17's row sums by the tensor cores on
// one warpgroup (the causal default, its ping-pong twin and the non-causal default below 2048: 0.94-0.98x; 567c2ab has
// their entries and types); step 18's two consumers without turns (back for the step: 0.97-1.00x under load) and
// non-causal ping-pong (0.98x under load; 99cc13d has the three entries); step 20's walks taking the next index two
// tiles ahead and late (0.96-1.00x the one-ahead walk; 4261339 has their entries and tile_scheduler.cuh's types);
// step 22's L2 eviction priorities (level, and the lab's L2 flush leaves evict-last lines: 3ca115f has their wrapper);
// step 23's 176-key kernel with the tile handed (0.999x at 2,16,8192,128: be7d3c3 has its entry).
template <class C, class Sched>
const char* launch_any(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? launch<C, true, Sched>(a, stream) : launch<C, false, Sched>(a, stream);
}
template <class C, class Sched>
const char* launch_non_causal(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? "candidate is for non-causal problems only" : launch<C, false, Sched>(a, stream);
}
template <class C, class Sched>
const char* launch_causal(const LabAttentionArgs* a, cudaStream_t stream) {
  return a->causal ? launch<C, true, Sched>(a, stream) : "candidate is for causal problems only";
}
static const LabTuneCandidate kCandidates64[] = {
    // Three consumers (BM = 192, O from the accumulators): the non-causal default from Nq, Nk >= 2048 (step 5 (c)),
    // the causal one from kLongCausal (step 10).
    {"C3 BN128 S2 persistent (non-causal)", launch_non_causal<Long64, Persistent>, LAB_SERVES_NON_CAUSAL},
    {"C3 BN128 S2 persistent (causal)", launch_causal<Long64, Persistent>, LAB_SERVES_CAUSAL},
    // One warpgroup, O by TMA, two Q buffers (step 6 (b)): the non-causal default below 2048 since step 6 (c).
    {"C1 BN128 S2 persistent tma-o q2", launch_any<Default64OTmaQ2, Persistent>},
    // Step 7: 64-key tiles (the causal diagonal's waste halved); `lab profile --candidate`'s GPU test profiles it
    // (another instantiation than the default's).
    {"C1 BN64 S2 persistent tma-o", launch_any<Short64OTma, Persistent>},
    // Step 7 (c): two Q buffers on Long64; step 13 (b) times it for Nq, Nk in [2048, 4096).
    {"C3 BN128 S2 persistent q2 (non-causal)", launch_non_causal<Long64Q2, Persistent>, LAB_SERVES_NON_CAUSAL},
    // Steps 11 (b) and 12: the last key tile's softmax and P V at half width, the row max as a tree and the mask
    // against a per-row limit, on O by TMA: the causal default below kLongCausal since step 12.
    {"C1 BN128 S2 persistent tma-o half-softmax tree-max row-limit (causal)", launch_causal<Default64OTmaHalfTreeRowLimit, Persistent>, LAB_SERVES_CAUSAL},
    // Step 13 (c): the causal default's changes with two Q buffers, one warpgroup and in ping-pong.
    {"C1 BN128 S2 persistent tma-o q2 half-softmax tree-max row-limit (causal)", launch_causal<Default64OTmaQ2Lean, Persistent>, LAB_SERVES_CAUSAL},
    {"C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit (causal)", launch_causal<PingPong64OTmaQ2Lean, Persistent>, LAB_SERVES_CAUSAL},
    // Step 17: P's row sums by the tensor cores on three consumers (without the LSE; one warpgroup's twins retired).
    {"C3 BN128 S2 persistent sum-mma (non-causal)", launch_non_causal<Long64SumMma, Persistent>, LAB_SERVES_NON_CAUSAL},
    // Step 19: the causal defaults' kernels on the dynamic, longest-first walk (tile_scheduler.cuh's LongestFirst).
    {"C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit (causal)", launch_causal<PingPong64OTmaQ2Lean, LongestFirst>, LAB_SERVES_CAUSAL},
    {"C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit (causal)", launch_causal<Default64OTmaHalfTreeRowLimit, LongestFirst>, LAB_SERVES_CAUSAL},
    {"C3 BN128 S2 longest-first (causal)", launch_causal<Long64, LongestFirst>, LAB_SERVES_CAUSAL},
    // Step 22: the two walking kernels with the tile handed to the consumers, the defaults from 1024 below kLongCausal.
    {"C2 BN128 S2 longest-first pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)", launch_causal<PingPong64Handed, LongestFirst>, LAB_SERVES_CAUSAL},
    {"C1 BN128 S2 longest-first tma-o half-softmax tree-max row-limit tile-handed (causal)", launch_causal<Default64Handed, LongestFirst>, LAB_SERVES_CAUSAL},
    // Step 23: the static walk's defaults with the tile handed to the consumers.
    {"C1 BN128 S2 persistent tma-o q2 tile-handed", launch_any<Default64OTmaQ2Handed, Persistent>},
    {"C2 BN128 S2 persistent pp tma-o q2 half-softmax tree-max row-limit tile-handed (causal)", launch_causal<PingPong64Handed, Persistent>, LAB_SERVES_CAUSAL},
};
static const LabTuneCandidate kCandidates128[] = {
    // Ping-pong on the persistent grid (steps 2-3), O by TMA (step 4), two Q buffers (step 6 (c)): the default.
    {"C2 BN128 S2 persistent pp tma-o q2", launch_any<PingPong128OTmaQ2, Persistent>},
    // Step 13: 176-key tiles (FlashAttention-3's at D=128 non-causal).
    {"C2 BN176 S2 persistent pp (non-causal)", launch_non_causal<PingPong128Keys176, Persistent>, LAB_SERVES_NON_CAUSAL},
    // Step 14: the same with O by TMA through the tile's last V stage.
    {"C2 BN176 S2 persistent pp o-in-v (non-causal)", launch_non_causal<PingPong128Keys176OInV, Persistent>, LAB_SERVES_NON_CAUSAL},
    // Step 19: the default's kernel on the dynamic, longest-first walk (causal).
    {"C2 BN128 S2 longest-first pp tma-o q2 (causal)", launch_causal<PingPong128OTmaQ2, LongestFirst>, LAB_SERVES_CAUSAL},
    // Step 23: the default with the tile handed to the consumers (the static walk's hand-off).
    {"C2 BN128 S2 persistent pp tma-o q2 tile-handed", launch_any<PingPong128OTmaQ2Handed, Persistent>},
};
static LabTuneList candidates(int head_dim) {
  switch (head_dim) {
    case 64: return lab_tune_list(kCandidates64);
    case 128: return lab_tune_list(kCandidates128);
    default: return {nullptr, 0};
  }
}
#endif

// Whether lab_forward_v9 launches the dynamic, longest-first walk for this problem: D=64 causal from
// kLongestFirstCausal (the shorter of Nq and Nk), on every kernel: the ping-pong below kShortCausal (step 19 (c)),
// the one-warpgroup kernel up to kLongCausal (step 21: by device time it ran 1.005x fp16 and 1.0085x bf16 the static
// walk at 8,32,2048,64, where call latency had it level, 1.000x in step 19 (b)), three consumers from there (step 19).
// Not at 512 (0.97x in `lab tune`; it lost on the device too).
constexpr int kLongestFirstCausal = 1024;
static bool uses_longest_first(const LabAttentionArgs* a) {
  if (a->head_dim != 64 || !a->causal) return false;
  return (a->seqlen_q < a->seqlen_k ? a->seqlen_q : a->seqlen_k) >= kLongestFirstCausal;
}

}  // namespace v9

static const char* refuse(const LabAttentionArgs* args) {
  if (args->head_dim != 64 && args->head_dim != 128) return "v9 supports head_dim 64 and 128";
  if (args->seqlen_q < 1 || args->seqlen_k < 1) return "v9 needs seqlen_q >= 1 and seqlen_k >= 1";
  // The row max is taken on raw scores and scaled afterwards, which needs a positive scale.
  if (!(args->softmax_scale > 0.f)) return "v9 needs softmax_scale > 0";
  const void* ptrs[4] = {args->q, args->k, args->v, args->o};
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "v9 needs q, k, v and o 16-byte aligned (TMA)";
  if (lab_hopper_refusal() != nullptr) return "v9 needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma + TMA); this GPU is not one";
  if (!lab_tma_encode_tiled()) return "v9: the driver has no cuTensorMapEncodeTiled (needs CUDA 12+ driver)";
  return nullptr;
}

LAB_EXPORT const char* lab_forward_v9(const LabAttentionArgs* args, cudaStream_t stream) {
  if (const char* why = refuse(args)) return why;
  // D = 64: one consumer warpgroup, two CTAs per SM, O stored by TMA (step 4 at D = 64), non-causal
  // with two Q buffers (step 6 (c)), causal with the last key tile's softmax and P V at half width
  // where its second half is masked whole (step 11 (b)), the row max as a tree and the mask against
  // a per-row limit (step 12), in ping-pong with two Q buffers below kShortCausal (step 13 (c)); non-causal with
  // long queries and keys, three
  // consumers (v6's choice, step 5 (c) from 2048), O from the accumulators, and without the LSE the row sums by the
  // tensor cores (step 17 (b)); causal three consumers from 8192 (step 10); every causal kernel from 1024 on the
  // dynamic, longest-first walk (steps 19, 19 (c) and 21; v9::uses_longest_first says where, for the workspace too),
  // the tile handed to the consumers below 8192 (step 22) and on the static walk's one-warpgroup and ping-pong
  // kernels (step 23).
  if (args->head_dim == 64) {
    if (args->causal) {
      const bool short_causal = args->seqlen_q < v9::kShortCausal && args->seqlen_k < v9::kShortCausal;
      const bool long_causal = args->seqlen_q >= v9::kLongCausal && args->seqlen_k >= v9::kLongCausal;
      if (long_causal) return v9::launch<v9::Long64, true, v9::LongestFirst>(args, stream);
      if (!short_causal)
        return v9::uses_longest_first(args) ? v9::launch<v9::Default64Handed, true, v9::LongestFirst>(args, stream)
                                            : v9::launch<v9::Default64OTmaHalfTreeRowLimit, true>(args, stream);
      return v9::uses_longest_first(args) ? v9::launch<v9::PingPong64Handed, true, v9::LongestFirst>(args, stream)
                                          : v9::launch<v9::PingPong64Handed, true>(args, stream);
    }
    const bool long_rows = args->seqlen_q >= v9::kLongRows && args->seqlen_k >= v9::kLongKeys;
    return long_rows ? v9::launch<v9::Long64SumMma, false>(args, stream)
                     : v9::launch<v9::Default64OTmaQ2Handed, false>(args, stream);
  }
  // D = 128, both masks: ping-pong on the persistent grid (steps 2 and 3), O stored by TMA (step 4), two Q buffers (step
  // 6 (c)), the tile handed to the consumers (step 23); non-causal with long queries and keys, 176-key tiles with O
  // stored by TMA through the tile's last V stage (step 14).
  if (args->causal) return v9::launch<v9::PingPong128OTmaQ2Handed, true>(args, stream);
  const bool long_176 = args->seqlen_q >= v9::kLong176 && args->seqlen_k >= v9::kLong176;
  return long_176 ? v9::launch<v9::PingPong128Keys176OInV, false>(args, stream)
                  : v9::launch<v9::PingPong128OTmaQ2Handed, false>(args, stream);
}

// The forward workspace (common.cuh): a dynamic scheduler's tile counter where the lab gives no zeroed counters (a
// graph capture past the lab's capture slab; steps 19 (b) and (d)). The tuning build asks for it on every such call
// (any candidate may walk dynamically), the plain build only for the calls its default walks dynamically.
LAB_EXPORT size_t lab_forward_v9_workspace(const LabAttentionArgs* args) {
  if (args->counters != nullptr) return 0;
#ifdef LAB_TUNING
  return lab_hopper_fwd::workspace_bytes<v9::LongestFirst>();
#else
  return v9::uses_longest_first(args) ? lab_hopper_fwd::workspace_bytes<v9::LongestFirst>() : 0;
#endif
}

#ifdef LAB_TUNING
LAB_EXPORT const char* lab_forward_v9_configs(int head_dim, LabDtype dtype) {
  return dtype == LAB_FLOAT32 ? "" : lab_tune_labels(v9::candidates(head_dim));
}
LAB_EXPORT const char* lab_forward_v9_config(const LabAttentionArgs* args, cudaStream_t stream, int config) {
  if (const char* why = refuse(args)) return why;
  return lab_tune_launch(v9::candidates(args->head_dim), args, stream, config);
}
#endif

// The rung's facts for the lab (lab/ladder/registry.py reads them; the header above is its record).
// Kept at the end of the file so that line numbers in stored profiles stay valid.
// lab:rung
// id = "v9"
// slug = "wgmma_fa3"
// title = "Hopper forward, FlashAttention-3's schedule: v6's wgmma + TMA pipeline on a persistent tile scheduler, causal tiles paired heavy with light (sm_90a)"
// dtypes = ["float16", "bfloat16"]
// head_dims = [64, 128]
// min_cc = "9.0"             # wgmma, TMA, setmaxnreg: Hopper only
// arch_flags = ["-gencode=arch=compute_90a,code=sm_90a"]
// attacks = ["latency-bound"]  # per-CTA prologue/epilogue and the grid's tail at short sequences
// grid = "flat"              # persistent: SMs x CTAs per SM, each looping over the tile list
// aligned16 = true           # TMA: the launcher refuses q, k, v, o not 16-byte aligned
// gqa = true                 # K/V heads dividing Q's: the producer loads K/V head bh / (H/Hkv) per tile of the walk (fwd_wgmma.cuh)
// writes_lse = true          # forward-only, it writes the row log-sum-exp for v8's backward (fwd_wgmma.cuh's WRITE_LSE)
// lab:end
