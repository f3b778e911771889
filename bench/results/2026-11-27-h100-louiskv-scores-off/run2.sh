#!/usr/bin/env bash
# Call 2: the scores' second launch spread over the units (each block of the first writes its
# softmax partials; call 1's second launch, a block a KV head, made a retrieval 0.25 ms a token
# slower than the torch ops): the recorded-retrieval GPU checks (the scores among them), then at
# 32K in / 512 out one τ and rate=10 with the kernels and with the torch scores
# (ENGRAM_TORCH_SCORES=1), stride 16 and full KV, llama3.1-8b shape, random weights, bf16.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-louiskv-scores-off/run2.sh
set -uo pipefail
SECONDS=0
mkdir -p /tmp/o && R=/tmp/o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F) torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')" >> $R/device.txt
OUT_SAVED=$OUT; OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh; OUT=$OUT_SAVED
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --only recorded_retrieval --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep FAIL $R/gpu_checks.log | head
grep "louiskv_scores" $R/gpu_checks.log
run() {  # name tokens decode spec
  timeout 150 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --tokens $2 \
    --decode-tokens $3 --repeat 1 --policy "$4" --json $R/$1.json > $R/$1.log 2>&1
  echo "$1 rc=$? $(python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print('%.3f ms/token (%.3f without build), device KV %.1f %% of full, retrievals/token %.3f, host %.2f wait %.2f ms/token' % (d['per_token_latency_ms'], d.get('per_token_latency_ms_without_build',0), 100*d.get('device_kv_fraction_of_full',0), d.get('retrievals_per_token',0), d.get('recorded_host_ms_per_token',0), d.get('recorded_wait_ms_per_token',0)))" $R/$1.json 2>/dev/null) at ${SECONDS}s"
}
run in32k-full 32768 512 "full"
for spec in "louiskv" "louiskv:rate=10" "louiskv:stride=16"; do
  run in32k-$(echo "$spec" | tr ':=,' '---') 32768 512 "$spec"
done
export ENGRAM_TORCH_SCORES=1
for spec in "louiskv" "louiskv:rate=10"; do
  run in32k-torch-scores-$(echo "$spec" | tr ':=,' '---') 32768 512 "$spec"
done
unset ENGRAM_TORCH_SCORES
rm -f $R/build.log
tar -C /tmp -czf $OUT/o.tar.gz o
