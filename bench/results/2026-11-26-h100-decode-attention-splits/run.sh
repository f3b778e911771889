#!/usr/bin/env bash
set -uo pipefail
mkdir -p $OUT/b && (OUT=$OUT/b; DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
for b in ${BPS:-2 4 8 16}; do
  echo "== blocks per SM $b"
  ENGRAM_DECODE_BLOCKS_PER_SM=$b timeout 120 $B/bench/engram-gpu-checks --only decode_attention --json $OUT/check-bps$b.json 2>&1 | grep -E "decode_attention 3B|FAIL|passed|failed" | head -8
  for run in ${RUNS:-llama3.2-3b:10240 llama3.2-3b:90000}; do
    shape=${run%%:*} tokens=${run##*:}
    ENGRAM_DECODE_BLOCKS_PER_SM=$b timeout 120 $CLI bench decode --shape $shape --device cuda --dtype bf16 --repeat 1 \
      --tokens $tokens --decode-tokens 256 --policy full --json /tmp/d.json > /dev/null 2> /tmp/d.err
    echo "$shape $tokens bps=$b rc=$? $(grep -o '"per_token_latency_ms": [0-9.]*' /tmp/d.json)"
  done
done 2>&1 | tee $OUT/summary.txt
