#!/usr/bin/env bash
# Call 4: per_head=2's kept scores built from the picks on the device (no host [L, H, n] index per
# shrink): the joint-selection GPU check, then the time to first token of the ragged set and of the
# uniform one at 32K in (llama3.1-8b shape, random weights, bf16, --kv-budget 8192, 64 out).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-retrieval/run4.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --only joint_selection --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|joint selection" $R/gpu_checks.log | head -4
LAYERS=6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144,6144
run_decode in32k-epicache-ragged 32768 64 "epicache:per_head=2,patch=2,layers=$LAYERS" --kv-budget 8192
run_decode in32k-epicache 32768 64 "epicache:patch=2" --kv-budget 8192
pack
