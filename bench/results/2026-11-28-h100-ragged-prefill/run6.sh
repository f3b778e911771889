#!/usr/bin/env bash
# Call 6 (the session's last commit): every GPU check, then the ragged set with decode-time
# retrieval (32K in / 512 out, louiskv:stride=16), whose window now also scores from its queries
# (RetrievingPolicy forwards probe_probabilities), and the uniform set with it.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run6.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL" $R/gpu_checks.log | head -5
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
run_decode in32k-ragged-louiskv 32768 512 "epicache:per_head=2,patch=2,layers=$LAYERS+louiskv:stride=16" --kv-budget 8192
run_decode in32k-uniform-louiskv 32768 512 "epicache:patch=2+louiskv:stride=16" --kv-budget 8192
pack
