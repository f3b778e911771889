#!/usr/bin/env bash
# Call 2: EpiCache per_head=2's joint selection ranked on the device (e877f20): every GPU check
# (the joint selection's device lists against the CPU's among them), then the per_head=2 runs of
# call 1 again (32K in / 512 out, llama3.1-8b shape, random weights, bf16, --kv-budget 8192),
# the uniform epicache set alone for its time to first token, and full KV.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-retrieval/run2.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|joint selection|ragged" $R/gpu_checks.log | head -20
LAYERS=6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144
run_decode in32k-epicache-ragged 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS" --kv-budget 8192
run_decode in32k-epicache-ragged-louiskv-stride-16 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS+louiskv:stride=16" --kv-budget 8192
run_decode in32k-epicache 32768 512 "epicache:patch=2" --kv-budget 8192
run_decode in32k-full 32768 512 "full"
pack
