#!/usr/bin/env bash
# Call 4: the shrink's host loops (EpiCache's lists from the device picks, the plan's [L, H, n]
# index, the working set's slot map) over the intra-op threads: the time to first token at 32K in
# (llama3.1-8b shape, random weights, bf16, --kv-budget 8192, 64 out) with the machine's threads
# and with one (OMP_NUM_THREADS=1, same build: the loops serial as before), uniform and ragged;
# GPU checks for the scoring (with the new causal rows) and the joint selection.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run4.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
for only in patch_and_pinned joint_selection; do
  $B/bench/engram-gpu-checks --only $only --json $R/gpu_checks-$only.json > $R/gpu_checks-$only.log 2>&1
  echo "gpu checks $only rc=$? PASS $(grep -c PASS $R/gpu_checks-$only.log) FAIL $(grep -c FAIL $R/gpu_checks-$only.log) at ${SECONDS}s"
done
grep causal $R/gpu_checks-patch_and_pinned.log
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
RAGGED="epicache:per_head=2,patch=2,layers=$LAYERS"
for rep in 1 2; do
  run_decode in32k-uniform-$rep 32768 64 "epicache:patch=2" --kv-budget 8192
  OMP_NUM_THREADS=1 run_decode in32k-uniform-1thread-$rep 32768 64 "epicache:patch=2" --kv-budget 8192
done
run_decode in32k-ragged 32768 64 "$RAGGED" --kv-budget 8192
OMP_NUM_THREADS=1 run_decode in32k-ragged-1thread 32768 64 "$RAGGED" --kv-budget 8192
pack
