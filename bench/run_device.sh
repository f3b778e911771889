#!/usr/bin/env bash
# Builds the engine against the GPU machine's PyTorch and runs every GPU measurement of
# issue 3 in one go: bf16 agreement with transformers, the GPU checks, prefill/decode speed of
# the qwen2.5-7b shape next to transformers. Results go to $OUT (see bench/README.md).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bench/run_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
B=/tmp/engram-build
mkdir -p /tmp/sq && dpkg -x .device/libsqlite3-dev_*.deb /tmp/sq
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_UI=OFF -DENGRAM_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
  -DSQLite3_INCLUDE_DIR=/tmp/sq/usr/include -DSQLite3_LIBRARY=/lib/x86_64-linux-gnu/libsqlite3.so.0 \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cmake --build $B --target engram-cli engram-gpu-checks -j16 >> "$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "built"
CLI=$B/app/cli/engram-cli
$B/bench/engram-gpu-checks --json "$OUT/gpu_checks.json" > "$OUT/gpu_checks.log" 2>&1; echo "gpu checks rc=$?"; tail -30 "$OUT/gpu_checks.log"
python3 bench/peers/hf_bf16_compare.py --cli $CLI --data tests/data --json "$OUT/bf16_vs_transformers.json" 2>&1 | grep -v Warning | tail -8
$CLI bench prefill --shape qwen2.5-7b --device cuda --dtype bf16 --tokens 4096 --repeat 5 --json "$OUT/engram_prefill.json" 2>&1 | tail -2
$CLI bench decode --shape qwen2.5-7b --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --json "$OUT/engram_decode.json" --trace "$OUT/decode_trace.jsonl" 2>&1 | tail -2
python3 bench/peers/hf_bench.py --shape qwen2.5-7b --tokens 4096 --decode-tokens 256 --repeat 3 --json "$OUT/transformers_qwen2.5-7b.json" 2>&1 | tail -2
