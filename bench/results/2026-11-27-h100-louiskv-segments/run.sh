#!/usr/bin/env bash
# LouisKV's temporal segments joined to at least `segment` tokens when they leave the window
# (segment=16, the new default, against segment=1, the rule before), llama3.1-8b shape (random
# weights, bf16; adaptive tau 0.7 retrieves at every token there, so segment=1 offloads a one-token
# unit a layer and step): the recorded-retrieval GPU checks, then 32K in / 512 out and 500 in /
# 4,096 out, each segment=1 then segment=16, per-token latency, offloaded units, device KV.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-louiskv-segments/run.sh
set -uo pipefail
SECONDS=0
mkdir -p /tmp/o && R=/tmp/o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F) torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')" >> $R/device.txt
OUT_SAVED=$OUT; OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh; OUT=$OUT_SAVED
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --only recorded_retrieval --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "recorded retrieval checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
run() {  # name tokens decode spec
  timeout 240 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --tokens $2 \
    --decode-tokens $3 --repeat 1 --policy "$4" --json $R/$1.json > $R/$1.log 2>&1
  echo "$1 rc=$? $(python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print('%.3f ms/token (%.3f without build), offloaded %d, device KV %.1f %% of full, retrievals/token %.2f, host %.2f ms/token' % (d['per_token_latency_ms'], d.get('per_token_latency_ms_without_build',0), d.get('offloaded_units',-1), 100*d.get('device_kv_fraction_of_full',0), d.get('retrievals_per_token',0), d.get('recorded_host_ms_per_token',0)))" $R/$1.json 2>/dev/null) at ${SECONDS}s"
}
for seg in 1 16; do run in32k-seg$seg 32768 512 "louiskv:tau=70,segment=$seg"; done
for seg in 1 16; do run in500-out4k-seg$seg 500 4096 "louiskv:tau=70,segment=$seg"; done
rm -f $R/build.log
tar -C /tmp -czf $OUT/o.tar.gz o
