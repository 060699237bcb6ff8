#!/usr/bin/env bash
# Step 19 (d)'s capture slab checked (issue 28; v9_notes "Step 19 (d)"): the counters' GPU test, whose graph half did
# not run in benchmarks/v9_step19d_gpu.sh (torch 2.11's debug_dump writes nothing without keep_graph). Two graphs
# captured from the candidates and from the plain default, replayed in turn against float64, their dot files without a
# memset node; then the default's memcheck.
#   OUT=$OUT bash benchmarks/v9_capture_counters_gpu.sh   # on the kind lent; carry .carry/wheels
. "$(dirname "$0")/gpu_call.sh"
gpu_call_begin v9cap
build_v9 300
step counters 120 "${PYTEST[@]}" -k 'counters'
step memcheck 120 "${PYTEST[@]}" -k 'test_v9_compute_sanitizer_is_clean and memcheck'
gpu_call_end counters memcheck
