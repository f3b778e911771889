#!/usr/bin/env bash
# 300 turns over a 90K history on the H200 with the balanced decode attention (llama3.2-3b shape,
# 96-token replies, E = 4, M = 8,192): EpiCache routed by word stems (epicache:embed=1,
# epicache-prepared: every episode built before the first turn, waiting ones caught up between
# turns), then prefix caching, on the same machine. Results straight into $OUT.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h200-decode-profile/run3.sh
set -uo pipefail
SECONDS=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> $OUT/device.txt
bash bench/run_device_epicache.sh build 2>&1 | tail -1
echo "built at ${SECONDS}s"
SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:210" EXTRA="--policy epicache:embed=1" \
  bash bench/run_device_epicache.sh turns 2>&1 | tail -2
echo "epicache at ${SECONDS}s"
SHAPE=llama3.2-3b DECODE=96 METHODS="prefix:$((585 - SECONDS))" bash bench/run_device_epicache.sh turns 2>&1 | tail -2
echo "prefix at ${SECONDS}s"
rm -f $OUT/*.out $OUT/build.log
gzip -f $OUT/*.err
