#!/usr/bin/env bash
# Batch-1 decode speed of the recorded step (engram-cli bench decode, policy full) on the GPU
# machine, this tree against an older commit built in the same call, so that both run on the
# same card: BASE_ARCHIVE is `git archive` of that commit (without tests/data, resources,
# packaging) carried in .device/. Shapes and lengths: RUNS="llama3.2-3b:10240 llama3.2-3b:90000
# llama3.1-8b:32768" (shape:prompt tokens), 256 decode tokens each.
#   ENGRAM_COMMIT=<sha> BASE_COMMIT=<sha> BASE_ARCHIVE=.device/old-<sha>.tgz OUT=<dir> \
#     bash bench/run_device_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT/base"
RUNS=${RUNS:-llama3.2-3b:10240 llama3.2-3b:90000 llama3.1-8b:32768}
ROOT=$PWD
DEVICE_TARGETS=engram-gpu-checks B=/tmp/engram-build source bench/device_build.sh
NEW_CLI=$CLI
if [ -n "${BASE_ARCHIVE:-}" ]; then
  rm -rf /tmp/base && mkdir -p /tmp/base && tar -C /tmp/base -xzf "$BASE_ARCHIVE"
  ln -sfn "$ROOT/resources" /tmp/base/resources
  ln -sfn "$ROOT/tests/data" /tmp/base/tests/data
  ln -sfn "$ROOT/.device" /tmp/base/.device
  (cd /tmp/base && OUT=$OUT/base B=/tmp/engram-build-base DEVICE_TARGETS= source bench/device_build.sh)
fi
for run in $RUNS; do
  shape=${run%%:*} tokens=${run##*:}
  for build in new base; do
    cli=$NEW_CLI commit=${ENGRAM_COMMIT:-new}
    if [ $build = base ]; then
      cli=/tmp/engram-build-base/app/cli/engram-cli commit=${BASE_COMMIT:-base}
      [ -x $cli ] || continue
    fi
    f=$OUT/decode-$shape-$tokens-$commit
    timeout 120 $cli bench decode --shape $shape --device cuda --dtype bf16 --repeat 1 \
      --tokens $tokens --decode-tokens 256 --policy full --json $f.json > /dev/null 2> $f.err
    echo "$shape $tokens $build ($commit) rc=$? $(grep -o '"per_token_latency_ms": [0-9.]*' $f.json)"
  done
done
