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
B=/tmp/engram-build
mkdir -p /tmp/sq && dpkg -x .device/libsqlite3-dev_*.deb /tmp/sq
nvidia-smi > "$OUT/device.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$OUT/device.txt" 2>&1
df -h /tmp >> "$OUT/device.txt" 2>&1  # the profile (SQLite + KV blob) lives under /tmp
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_UI=OFF -DENGRAM_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
  -DSQLite3_INCLUDE_DIR=/tmp/sq/usr/include -DSQLite3_LIBRARY=/lib/x86_64-linux-gnu/libsqlite3.so.0 \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cmake --build $B --target engram-cli -j16 >> "$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "built"
CLI=$B/app/cli/engram-cli
timeout 300 $CLI bench restore --shape qwen2.5-7b --tokenizer tests/data/models/llama-gqa/tokenizer.model \
  --device cuda --dtype bf16 --history-tokens 16000 --repeat 3 --json "$OUT/restore-qwen2.5-7b.json" \
  > "$OUT/restore-qwen2.5-7b.out" 2> "$OUT/restore-qwen2.5-7b.err"
rc=$?
echo "bench restore rc=$rc"
cat "$OUT/restore-qwen2.5-7b.err"
exit $rc
