#!/usr/bin/env bash
# Issue 4, "restore without re-prefill" on the GPU machine: a long stored conversation on the
# qwen2.5-7b shape (random weights, bf16), time to the first token of the next answer after a
# fresh start, restored from the store's KV blob vs re-prefilled from the stored text, in the same
# run. The text is tokenized with the Llama-2 tokenizer of tests/data (its 32k ids are valid rows
# of the shape's 152k embedding). Builds engram-cli against the machine's PyTorch as
# bench/run_device.sh does; results go to $OUT.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/run_device_restore.sh
# Needs .device/libsqlite3-dev_*.deb (carried; .device/ is git-ignored). Build ~2-3 min on 16
# cores; the benchmark (16k-token history, KV blob ~0.9 GB, 3 runs) is capped at 5 min.
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
nvidia-smi > "$OUT/device.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$OUT/device.txt" 2>&1
df -h /tmp >> "$OUT/device.txt" 2>&1  # the profile (SQLite + KV blob) lives under /tmp
source bench/device_build.sh
timeout 300 $CLI bench restore --shape qwen2.5-7b --tokenizer tests/data/models/llama-gqa/tokenizer.model \
  --device cuda --dtype bf16 --history-tokens 16000 --repeat 3 --json "$OUT/restore-qwen2.5-7b.json" \
  > "$OUT/restore-qwen2.5-7b.out" 2> "$OUT/restore-qwen2.5-7b.err"
rc=$?
echo "bench restore rc=$rc"
cat "$OUT/restore-qwen2.5-7b.err"
exit $rc
