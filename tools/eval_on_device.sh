#!/usr/bin/env bash
# Builds engram-cli against the GPU machine's PyTorch (as bench/run_device.sh) and evaluates a
# model folder with the same harness as on the CPU: closed-loop embodied tasks and conversation
# QA on held-out seeds. Results (JSON) go to $OUT.
#   OUT=<dir> bash tools/eval_on_device.sh MODEL_DIR [episodes]
#   bash tools/eval_on_device.sh --build-only      (e.g. in the background while training)
set -uo pipefail
OUT=${OUT:-/tmp/engram-eval}
MODEL=${1:?model folder}
EPISODES=${2:-20}
B=${ENGRAM_DEVICE_BUILD:-/tmp/engram-build}
mkdir -p "$OUT" /tmp/sq
if [ ! -x "$B/app/cli/engram-cli" ]; then
  dpkg -x .device/libsqlite3-dev_*.deb /tmp/sq
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_UI=OFF -DENGRAM_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
    -DSQLite3_INCLUDE_DIR=/tmp/sq/usr/include -DSQLite3_LIBRARY=/lib/x86_64-linux-gnu/libsqlite3.so.0 \
    > /tmp/eval-build.log 2>&1 && cmake --build "$B" --target engram-cli -j16 >> /tmp/eval-build.log 2>&1 \
    || { grep -E "error" -A5 /tmp/eval-build.log | head -40; exit 1; }
fi
[ "$MODEL" = "--build-only" ] && exit 0
CLI=$B/app/cli/engram-cli
$CLI eval embodied --model "$MODEL" --device cuda --episodes "$EPISODES" --seed 1 \
  --json "$OUT/eval_embodied.json" 2>&1 | grep -v "^episode" | tail -30
$CLI eval conversation --model "$MODEL" --device cuda --episodes "$EPISODES" \
  --json "$OUT/eval_conversation.json" 2>&1 | tail -10
