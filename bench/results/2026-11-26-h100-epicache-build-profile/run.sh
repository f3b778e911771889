#!/usr/bin/env bash
# EpiCache: profile of one episode build (turn 0: clustering + the routed episode's block prefill
# of the 90K history under M = 8192) on the 3B shape, plus the sweep row at 90K.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
COMMON="--shape llama3.2-3b --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 --kv-budget 8192 --decode-tokens 32"
timeout 200 $CLI bench epicache $COMMON --methods epicache --history-tokens 90000 --turns 3 \
  --profile /tmp/prof --profile-turns 0-1 --json $OUT/epicache-build-profile.json > /tmp/ep.out 2> /tmp/ep.err
echo "rc=$?"; grep -v "turn [0-9]" /tmp/ep.err | tail -5
python3 bench/profile_summary.py /tmp/prof --top 40 > $OUT/profile-build.txt 2>&1
head -60 $OUT/profile-build.txt
rm -f $OUT/build.log $OUT/*.out
