#!/usr/bin/env bash
# Every GPU check, the episode build profiled again (turn 1, 3B at 90K), then EpiCache vs prefix
# caching over 300 turns of a 90K history (llama3.2-3b shape), after the patch score kernels
# (gpu/softmax_column_max.h), the batched shrink ranking and the page-locked plan index.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
cmake --build $B --target engram-gpu-checks -j16 > /tmp/gc.log 2>&1 || { grep -E "error" -A3 /tmp/gc.log | head -30; exit 1; }
$B/bench/engram-gpu-checks --json /tmp/gpu_checks.json > /tmp/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS /tmp/gpu_checks.log) FAIL $(grep -c FAIL /tmp/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|threw|softmax_column_max" /tmp/gpu_checks.log | head -12
cp /tmp/gpu_checks.log $OUT/gpu_checks.log
COMMON="--shape llama3.2-3b --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 --kv-budget 8192 --decode-tokens 32"
timeout 150 $CLI bench epicache $COMMON --methods epicache --history-tokens 90000 --turns 3 \
  --profile /tmp/prof --profile-turns 1-2 --json /tmp/epicache-build-profile.json > /tmp/ep.out 2> /tmp/ep.err
echo "profile rc=$? at ${SECONDS}s"
timeout 120 python3 bench/profile_summary.py /tmp/prof --top 25 --gaps 0.1 > $OUT/profile-build-gaps.txt 2>&1
head -3 $OUT/profile-build-gaps.txt; grep -A 4 "device idle" $OUT/profile-build-gaps.txt
grep -A 6 "user_annotation" $OUT/profile-build-gaps.txt | head -7
SHAPE=llama3.2-3b METHODS="epicache:230 prefix:150" bash bench/run_device_epicache.sh turns
echo "done at ${SECONDS}s"
rm -f $OUT/build.log $OUT/*.out
