#!/usr/bin/env bash
# per_head=2's prefill blocks through FlashAttention's variable-length kernel (each KV head's valid
# slots read in place) instead of the masked call: every GPU check (the new ragged_prefill rows:
# both paths against f32 on the CPU, with their times), then the time to first token at 32K in
# (llama3.1-8b shape, random weights, bf16, --kv-budget 8192, 64 out) of the ragged set with the
# new path, with the masked one (ENGRAM_MASKED_RAGGED=1, same build) and of the uniform set; then
# a profile of the ragged set's prefill.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|ragged prefill" $R/gpu_checks.log | head -12
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
RAGGED="epicache:per_head=2,patch=2,layers=$LAYERS"
run_decode in32k-ragged 32768 64 "$RAGGED" --kv-budget 8192
ENGRAM_MASKED_RAGGED=1 run_decode in32k-ragged-masked 32768 64 "$RAGGED" --kv-budget 8192
run_decode in32k-uniform 32768 64 "epicache:patch=2" --kv-budget 8192
run_decode in32k-ragged-again 32768 64 "$RAGGED" --kv-budget 8192
run_decode in32k-ragged-profiled 32768 8 "$RAGGED" --kv-budget 8192 --profile /tmp/prof
python3 bench/profile_summary.py /tmp/prof --top 30 > $R/profile-ragged.txt 2>&1
head -45 $R/profile-ragged.txt
pack
