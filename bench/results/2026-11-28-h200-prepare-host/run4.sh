#!/usr/bin/env bash
# 300 turns, EpiCache then prefix caching, on the machine run3.sh left warm (its build kept).
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-host/run4.sh
set -uo pipefail
SECONDS=0
mkdir -p /tmp/o4 && R=/tmp/o4
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> $R/device.txt
SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:290" EXTRA="--policy epicache:embed=1" \
  OUT=$R bash bench/run_device_epicache.sh turns 2>&1 | tail -2
echo "epicache at ${SECONDS}s"
SHAPE=llama3.2-3b DECODE=96 METHODS="prefix:$((585 - SECONDS))" OUT=$R bash bench/run_device_epicache.sh turns 2>&1 | tail -2
echo "prefix at ${SECONDS}s"
rm -f $R/*.out
gzip -f $R/*.err
tar -C /tmp -czf $OUT/o.tar.gz o4
