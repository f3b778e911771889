#!/usr/bin/env bash
# Decode-time retrieval over a ragged EpiCache working set (per_head=2 with layer budgets below
# the slot budget): the recorded-retrieval GPU checks (ragged cases: per-head validity on both
# decode paths, hidden slots poisoned, a covering budget against the plain ragged decode), then
# at 32K in / 512 out on the llama3.1-8b shape (random weights, bf16, --kv-budget 8192): the
# ragged set alone, with louiskv stride 16, and the uniform epicache set with louiskv stride 16.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-retrieval/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --only recorded_retrieval --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep "recorded retrieval" $R/gpu_checks.log | grep -E "ragged|FAIL"
LAYERS=6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144
run_decode in32k-epicache-ragged 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS" --kv-budget 8192
run_decode in32k-epicache-ragged-louiskv-stride-16 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS+louiskv:stride=16" --kv-budget 8192
run_decode in32k-epicache-louiskv-stride-16 32768 512 "epicache:patch=2+louiskv:stride=16" --kv-budget 8192
run_decode in32k-full 32768 512 "full"
pack
