#!/usr/bin/env bash
# Prefix caching's 300 turns on the machine run3.sh left warm (its build in /tmp/engram-build).
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-steps/run4.sh
set -uo pipefail
SECONDS=0
mkdir -p /tmp/o2 && R=/tmp/o2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> $R/device.txt
SHAPE=llama3.2-3b DECODE=96 METHODS="prefix:570" OUT=$R bash bench/run_device_epicache.sh turns 2>&1 | tail -3
echo "prefix at ${SECONDS}s"
rm -f $R/*.out
gzip -f $R/*.err
tar -C /tmp -czf $OUT/o.tar.gz o2
