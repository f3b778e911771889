#!/usr/bin/env bash
# The reproducible training command of engram-tiny, on the GPU machine, from the repository
# root. Two stages, each within one device call (10 minutes):
#   stage 1: tokenizer + model from scratch on .device/data1 (all three kinds of record);
#   stage 2: warm start from stage 1 on .device/data2, weighted toward conversation QA, which
#            stage 1 did not learn (retrieval from a 3,000-token history needs more of it).
# The data folders are written by engram-cli export and tools/pack_qa_records.py; the exact
# commands are in resources/models/engram-tiny/README.md.
#   OUT=<dir> bash tools/train_on_device.sh 1 [minutes]
#   OUT=<dir> INIT=<stage-1 folder> bash tools/train_on_device.sh 2 [minutes]
# The trainer checks validation and saving before it trains, so a fault shows in seconds.
set -euo pipefail
OUT=${OUT:-/tmp/engram-tiny-out}
STAGE=${1:?stage 1 or 2}
MINUTES=${2:-6.5}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case "$STAGE" in
  1) ARGS=(--data .device/data1 --seed 1) ;;
  2) ARGS=(--data .device/data2 --seed 2 --init "${INIT:?INIT=stage-1 folder}" --lr 1e-3 --warmup 50) ;;
  *) echo "stage is 1 or 2" >&2; exit 2 ;;
esac
PYTHONUNBUFFERED=1 python3 tools/train_engram_tiny.py "${ARGS[@]}" --out "$OUT" \
  --minutes "$MINUTES" 2>&1 | grep -v -i warning
ls -la "$OUT"
