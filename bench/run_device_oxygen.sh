#!/usr/bin/env bash
# Issue 18 (OxyGen) on the GPU machine: engram-cli bench oxygen on the qwen2.5-7b shape (random
# weights, bf16) over the household world, prompts tokenized with engram-tiny's tokenizer (its
# 4,096 ids are valid rows of the shape's 152k embedding). Random weights never end a line, so
# every request runs to its token limit: a fixed workload (10-token actions, 24-token narrations
# every frame, 32-token notes every 4 frames, a 32-token chat reply every 8).
#  0. the GPU checks (engram-gpu-checks; its batched recorded step rows are OxyGen's);
#  1. as fast as possible, isolated vs unified on the same frames (speedup, action Hz, tok/s),
#     with recorded graph steps (the default) and with the per-layer path (--per-layer);
#  2. every language task in every frame (the decoding-heavy schedule), and with 64-token replies;
#  3. at fixed action rates, isolated vs unified: deadline misses (a feasible rate has none).
# Builds engram-cli against the machine's PyTorch (bench/device_build.sh); results go to $OUT.
#   ENGRAM_COMMIT=<sha> OUT=<dir> [CHECKS=0] bash bench/run_device_oxygen.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt" 2>&1
echo "commit ${ENGRAM_COMMIT:-unknown}" >> "$OUT/device.txt"
DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh
if [ "${CHECKS:-1}" = 1 ]; then
  timeout 240 $B/bench/engram-gpu-checks --json "$OUT/gpu_checks.json" > "$OUT/gpu_checks.log" 2>&1
  echo "gpu checks rc=$?"; grep -E "^(FAIL|TIME oxygen|PASS batched)" "$OUT/gpu_checks.log"
  echo "$(grep -c '^PASS' "$OUT/gpu_checks.log") PASS, $(grep -c '^FAIL' "$OUT/gpu_checks.log") FAIL"
fi
COMMON="--shape qwen2.5-7b --tokenizer resources/models/engram-tiny/tokenizer.model --device cuda
  --dtype bf16 --frames 32 --action-tokens 10"
run() {  # name, extra flags
  local name=$1; shift
  timeout 200 $CLI bench oxygen $COMMON --mode both "$@" --json "$OUT/oxygen-qwen2.5-7b-$name.json" \
    > /dev/null 2> "$OUT/oxygen-qwen2.5-7b-$name.err"
  echo "$name rc=$?"; tail -3 "$OUT/oxygen-qwen2.5-7b-$name.err"
}
# One archive: the device call brings back only a few files.
trap 'tar -C "$OUT" -czf "$OUT/oxygen.tgz" $(cd "$OUT" && ls *.json *.err gpu_checks.log 2>/dev/null) && rm -f "$OUT"/*.err "$OUT"/oxygen-*.json' EXIT
run max
run max-per-layer --per-layer
run every-task --note-every 1 --chat-every 1
run every-task-long --note-every 1 --chat-every 1 --narration-tokens 64 --note-tokens 64 --chat-tokens 64
for hz in 5 10; do run ${hz}hz --action-hz $hz; done
