#!/usr/bin/env bash
# Where KEEP's TTFT goes on the host (issue 16): a Kineto trace of one KEEP step at 40 segments
# (qwen2.5-14b shape, bf16, KV in pinned host pages) summed by kernel and host op, with the
# device's idle stretches and what the host ran during them; TTFT rows beside it.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-keep-host/run.sh
set -uo pipefail
SECONDS=0
mkdir -p $OUT/b && (OUT=$OUT/b; source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
echo "built at ${SECONDS}s"
for m in ${PROFILE_METHODS:-keep cacheblend}; do
  taskset -c 10,11 timeout 200 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments 40 \
    --repeat 5 --keep-options probe=8 --methods full-recompute,$m --profile /tmp/prof --profile-method $m \
    --json $OUT/ttft-profiled-$m.json > $OUT/ttft-profiled-$m.log 2>&1
  echo "profiled $m rc=$? at ${SECONDS}s"
  f=$(ls /tmp/prof*40*$m*.json | head -1)
  python3 bench/profile_summary.py "$f" --top 40 --gaps 0.02 > $OUT/summary-$m.txt 2>&1
  grep -E "^==|^--" $OUT/summary-$m.txt
done
${EXTRA_CMD:-true}
cd $OUT && tar czf all.tgz *.json *.log *.txt && rm -f *.json
