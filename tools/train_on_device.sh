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
#   OUT=<dir> INIT=<previous folder> DATA=<data folder> SEED=<n> \
#       bash tools/train_on_device.sh continue [minutes]
# EXTRA="..." adds trainer flags (round 6 ran with EXTRA=--compile: no gain, see the trainer).
# "continue" is the later rounds (tools/make_training_data.sh writes their data): a warm start
# with language-modelling loss on the histories too (--prompt-weight), which stages 1-2 lacked:
# the loss on answers alone gave ~100 loss tokens per 3,000-token history and the model never
# learned to copy a fact from it.
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
  continue) ARGS=(--data "${DATA:?DATA=data folder}" --seed "${SEED:?SEED=n}"
               --init "${INIT:?INIT=previous folder}" --lr "${LR:-1e-3}" --warmup 50
               --prompt-weight 0.1 --embodied-prompt-weight 0.02) ;;
  *) echo "stage is 1, 2 or continue" >&2; exit 2 ;;
esac
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
PYTHONUNBUFFERED=1 python3 tools/train_engram_tiny.py "${ARGS[@]}" "${EXTRA_ARGS[@]}" --out "$OUT" \
  --minutes "$MINUTES" 2>&1 | grep --line-buffered -v -i warning
ls -la "$OUT"
