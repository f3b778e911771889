#!/usr/bin/env bash
# Call 7 (review commit): the GPU checks of the two kernels that now share gpu/float_convert.cuh's
# f32 four-wide load: decode attention and LouisKV's scores (with the recorded retrieval step).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run7.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
for only in decode_attention recorded_retrieval; do
  timeout 40 $B/bench/engram-gpu-checks --only $only --json $R/gpu_checks-$only.json > $R/gpu_checks-$only.log 2>&1
  echo "gpu checks $only rc=$? PASS $(grep -c PASS $R/gpu_checks-$only.log) FAIL $(grep -c FAIL $R/gpu_checks-$only.log) at ${SECONDS}s"
done
pack
