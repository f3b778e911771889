#!/usr/bin/env bash
# EpiCache: where the GPU waits while one episode is built (turn 1 of the 3B shape at 90K: block
# prefill of the history under M = 8192 for a newly routed episode), from a Kineto trace with
# engram's named regions, then LouisKV's 32K in / 512 out latencies after the decode folds.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
COMMON="--shape llama3.2-3b --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 --kv-budget 8192 --decode-tokens 32"
timeout 200 $CLI bench epicache $COMMON --methods epicache --history-tokens 90000 --turns 3 \
  --profile /tmp/prof --profile-turns 1-2 --json $OUT/epicache-build-profile.json > /tmp/ep.out 2> /tmp/ep.err
echo "rc=$? at ${SECONDS}s"; grep -v "turn [0-9]" /tmp/ep.err | tail -3; grep "turn [0-9]" /tmp/ep.err | head -4
ls -la /tmp/prof | head -3
timeout 200 python3 bench/profile_summary.py /tmp/prof --top 30 --gaps 0.1 > $OUT/profile-build-gaps.txt 2>&1
echo "summary rc=$? at ${SECONDS}s"
grep -A 200 "device idle" $OUT/profile-build-gaps.txt | head -75
PHASES=stridelatency bash bench/run_device_louiskv.sh 2>&1 | grep -E "rc=" 
echo "done at ${SECONDS}s"
rm -f $OUT/build.log
