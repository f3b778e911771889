#!/usr/bin/env bash
# The retrieval map on the GPU (9c42c2c): every GPU check of main, then traced decodes of the
# llama3.1-8b shape (random weights, bf16) at 8,192 in / 128 out with louiskv (adaptive tau 0.7,
# and a fixed stride of 16) and pageretrieval, each writing its retrieval map beside its
# intervals (--trace: the per-layer path, as every traced request), summarised by map_check.py.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-retrieval-map/run.sh
set -uo pipefail
HERE=bench/results/2026-11-27-h100-retrieval-map
SECONDS=0
mkdir -p /tmp/o && R=/tmp/o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F) torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')" >> $R/device.txt
OUT_SAVED=$OUT; OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh; OUT=$OUT_SAVED
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep FAIL $R/gpu_checks.log | head
for spec in "louiskv" "louiskv:stride=16" "pageretrieval"; do
  name=$(echo "$spec" | tr ':=,' '---')
  timeout 240 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --tokens 8192 \
    --decode-tokens 128 --repeat 1 --policy "$spec" --trace $R/trace-$name.jsonl \
    --json $R/decode-$name.json > $R/decode-$name.log 2>&1
  echo "$spec rc=$? at ${SECONDS}s"
  python3 $HERE/map_check.py $R/trace-$name.jsonl | tee $R/map-$name.txt
  # The map is the check; the intervals are many: keep the map line and a count.
  grep -c '"phase"' $R/trace-$name.jsonl > $R/intervals-$name.count
  grep '"retrieval_map"' $R/trace-$name.jsonl | gzip > $R/map-$name.jsonl.gz
  rm -f $R/trace-$name.jsonl
done
rm -f $R/build.log
tar -C /tmp -czf $OUT/o.tar.gz o
