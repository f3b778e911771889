#!/usr/bin/env bash
# EpiCache vs prefix caching, 300 turns over a 90K history, llama3.2-3b shape, one call on one
# machine (the H200 of the 2026-11-27 session 13 LouisKV calls, warm), from the repository root
# with .device/ carried.
export ENGRAM_COMMIT=c9030ee; SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1); echo "built at ${SECONDS}s"
SHAPE=llama3.2-3b METHODS="epicache:200 prefix:150" bash bench/run_device_epicache.sh turns 2>&1 | tail -12
echo "done at ${SECONDS}s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit c9030ee date $(date -u +%F)" >> $OUT/device.txt
rm -f $OUT/build.log $OUT/*.out
