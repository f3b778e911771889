#!/usr/bin/env bash
# Call 3: the index in host memory (`host_index=1`) under the adaptive rule, where every scoring
# reads the index over PCIe: 32K in / 512 out louiskv:rate=10 with the kernels (scores only where
# a layer retrieves) and with the torch scores (ENGRAM_TORCH_SCORES=1: every step), llama3.1-8b
# shape, random weights, bf16. Same CUDA code as call 2 (its GPU checks stand).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-louiskv-scores-off/run3.sh
set -uo pipefail
SECONDS=0
mkdir -p /tmp/o && R=/tmp/o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F) torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')" >> $R/device.txt
OUT_SAVED=$OUT; OUT=$R source bench/device_build.sh; OUT=$OUT_SAVED
echo "built at ${SECONDS}s"
run() {  # name tokens decode spec
  timeout 150 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --tokens $2 \
    --decode-tokens $3 --repeat 1 --policy "$4" --json $R/$1.json > $R/$1.log 2>&1
  echo "$1 rc=$? $(python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print('%.3f ms/token (%.3f without build), device KV %.1f %% of full, retrievals/token %.3f, host %.2f wait %.2f ms/token' % (d['per_token_latency_ms'], d.get('per_token_latency_ms_without_build',0), 100*d.get('device_kv_fraction_of_full',0), d.get('retrievals_per_token',0), d.get('recorded_host_ms_per_token',0), d.get('recorded_wait_ms_per_token',0)))" $R/$1.json 2>/dev/null) at ${SECONDS}s"
}
run in32k-host-index-louiskv-rate-10 32768 512 "louiskv:rate=10,host_index=1"
export ENGRAM_TORCH_SCORES=1
run in32k-torch-scores-host-index-louiskv-rate-10 32768 512 "louiskv:rate=10,host_index=1"
unset ENGRAM_TORCH_SCORES
rm -f $R/build.log
tar -C /tmp -czf $OUT/o.tar.gz o
