#!/usr/bin/env bash
# Issue 15, one GPU machine (session 24): every GPU check; a Kineto trace of the recorded 3B
# decode step at an episode's 10,240 slots (each kernel's device time inside the replayed graph);
# 300 turns over a 90K history with EpiCache (epicache:embed=1, epicache-prepared), the build
# with the history rendered once per change (771439b), the k-means restarts on threads and the
# episode pool pinned on its own thread. Prefix caching on the same machine: run2.sh right after.
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-host/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL" $R/gpu_checks.log | head -20
gzip -f $R/gpu_checks.log $R/gpu_checks.json
timeout 90 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens 10240 \
  --decode-tokens 32 --repeat 1 --policy full --profile /tmp/decode-3b-10240.trace.json \
  --json $R/decode-3b-10240-profiled.json > $R/decode-3b-10240-profiled.log 2>&1
echo "profiled decode rc=$? at ${SECONDS}s"
python3 bench/kernel_times.py /tmp/decode-3b-10240.trace.json > $R/decode-3b-10240-kernels.txt 2>&1
head -40 $R/decode-3b-10240-kernels.txt
gzip -c /tmp/decode-3b-10240.trace.json > $R/decode-3b-10240.trace.json.gz
SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:$((570 - SECONDS))" \
  EXTRA="--policy epicache:embed=1" OUT=$R bash bench/run_device_epicache.sh turns 2>&1 | tail -3
echo "epicache at ${SECONDS}s"
rm -f $R/*.out
gzip -f $R/*.err
pack
