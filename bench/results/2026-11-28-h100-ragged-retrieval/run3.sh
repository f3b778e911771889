#!/usr/bin/env bash
# Call 3: LouisKV over a ragged layer in one masked k-means (61b4230): the recorded-retrieval GPU
# checks (ragged cases now through the masked clustering on the device; the joint selection), then
# the ragged set with louiskv stride 16 (its build) and the uniform one beside it, 32K in / 512 out,
# llama3.1-8b shape, random weights, bf16, --kv-budget 8192.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-retrieval/run3.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --only recorded_retrieval --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|joint selection|ragged" $R/gpu_checks.log | head -8
LAYERS=6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144
run_decode in32k-epicache-ragged-louiskv-stride-16 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS+louiskv:stride=16" --kv-budget 8192
run_decode in32k-epicache-louiskv-stride-16 32768 512 "epicache:patch=2+louiskv:stride=16" --kv-budget 8192
run_decode in32k-epicache-ragged-louiskv 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS+louiskv" --kv-budget 8192
pack
