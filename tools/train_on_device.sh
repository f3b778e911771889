#!/usr/bin/env bash
# The one reproducible training command of engram-tiny, run on the GPU machine from the
# repository root with the data exported by engram-cli in .device/data (see
# resources/models/engram-tiny/README.md for the export commands):
#   OUT=<dir> bash tools/train_on_device.sh [minutes]
# The trainer checks validation and saving before it trains, so a fault shows in seconds.
set -euo pipefail
OUT=${OUT:-/tmp/engram-tiny-out}
MINUTES=${1:-7}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
PYTHONUNBUFFERED=1 python3 tools/train_engram_tiny.py --data .device/data --out "$OUT" --seed 1 \
  --minutes "$MINUTES" 2>&1 | grep -v -i warning
ls -la "$OUT"
