#!/usr/bin/env bash
# Issue 18 (OxyGen) on the GPU machine: engram-cli bench oxygen on the qwen2.5-7b shape (random
# weights, bf16) over the household world, prompts tokenized with engram-tiny's tokenizer (its
# 4,096 ids are valid rows of the shape's 152k embedding). Random weights never end a line, so
# every request runs to its token limit: a fixed workload (10-token actions, 24-token narrations
# every frame, 32-token notes every 4 frames, a 32-token chat reply every 8).
#  1. as fast as possible, isolated vs unified on the same frames (speedup, action Hz, tok/s);
#  2. at fixed action rates, isolated vs unified: deadline misses (a feasible rate has none).
# Builds engram-cli against the machine's PyTorch (bench/device_build.sh); results go to $OUT.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/run_device_oxygen.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt" 2>&1
echo "commit ${ENGRAM_COMMIT:-unknown}" >> "$OUT/device.txt"
source bench/device_build.sh
COMMON="--shape qwen2.5-7b --tokenizer resources/models/engram-tiny/tokenizer.model --device cuda
  --dtype bf16 --frames 32 --action-tokens 10"
timeout 200 $CLI bench oxygen $COMMON --mode both --json "$OUT/oxygen-qwen2.5-7b-max.json" \
  > /dev/null 2> "$OUT/oxygen-qwen2.5-7b-max.err"
echo "max rate rc=$?"; tail -3 "$OUT/oxygen-qwen2.5-7b-max.err"
for hz in 5 10; do
  timeout 120 $CLI bench oxygen $COMMON --mode both --action-hz $hz \
    --json "$OUT/oxygen-qwen2.5-7b-${hz}hz.json" > /dev/null 2> "$OUT/oxygen-qwen2.5-7b-${hz}hz.err"
  echo "${hz} Hz rc=$?"; tail -3 "$OUT/oxygen-qwen2.5-7b-${hz}hz.err"
done
