#!/usr/bin/env bash
# LouisKV with its units' index in page-locked host memory (host_index=1), 500 in / 16K out on
# the llama3.1-8b shape (random weights, bf16), fixed stride 16 (the setting of the 17.3 % row in
# docs/louiskv.md): the recorded-retrieval GPU checks, then one run's per-token latency and device
# KV share.   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-louiskv-host-index/run.sh
set -uo pipefail
SECONDS=0
mkdir -p /tmp/o && R=/tmp/o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F) torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')" >> $R/device.txt
OUT_SAVED=$OUT; OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh; OUT=$OUT_SAVED
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --only recorded_retrieval --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "recorded retrieval checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
timeout 300 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --tokens 500 \
  --decode-tokens 16384 --repeat 1 --policy "louiskv:tau=70,stride=16,host_index=1" \
  --json $R/out16k-host-index.json > $R/out16k-host-index.log 2>&1
echo "rc=$? $(python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print('%.3f ms/token, device KV %.1f %% of full, offloaded %d, decode peak above weights %.2f GB' % (d['per_token_latency_ms'], 100*d['device_kv_fraction_of_full'], d['offloaded_units'], d['decode_peak_above_weights_bytes']/1e9))" $R/out16k-host-index.json 2>/dev/null) at ${SECONDS}s"
rm -f $R/build.log
tar -C /tmp -czf $OUT/o.tar.gz o
