#!/usr/bin/env bash
# Call 3: EpiCache's snapkv window scored from its queries and keys (cached_attention_max, causal)
# instead of the runner's f32 probabilities: GPU checks for the scoring and the ragged prefill,
# then the time to first token at 32K in (llama3.1-8b shape, random weights, bf16, --kv-budget
# 8192, 64 out) with the new scoring and with the probed one (ENGRAM_PROBED_WINDOW=1, same build),
# per head (uniform) and per_head=2 (ragged), and full KV beside them.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run3.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
for only in patch_and_pinned ragged_prefill; do
  $B/bench/engram-gpu-checks --only $only --json $R/gpu_checks-$only.json > $R/gpu_checks-$only.log 2>&1
  echo "gpu checks $only rc=$? PASS $(grep -c PASS $R/gpu_checks-$only.log) FAIL $(grep -c FAIL $R/gpu_checks-$only.log) at ${SECONDS}s"
done
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
RAGGED="epicache:per_head=2,patch=2,layers=$LAYERS"
for rep in 1 2; do
  run_decode in32k-uniform-$rep 32768 64 "epicache:patch=2" --kv-budget 8192
  ENGRAM_PROBED_WINDOW=1 run_decode in32k-uniform-probed-$rep 32768 64 "epicache:patch=2" --kv-budget 8192
  run_decode in32k-ragged-$rep 32768 64 "$RAGGED" --kv-budget 8192
  ENGRAM_PROBED_WINDOW=1 run_decode in32k-ragged-probed-$rep 32768 64 "$RAGGED" --kv-budget 8192
done
run_decode in32k-full 32768 64 full
pack
