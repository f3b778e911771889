#!/usr/bin/env bash
# Issue 15, one GPU machine (session 25): every GPU check; where a preparation step's time goes
# now (a Kineto trace of epicache-prepared's steps A-B before the first turn on the llama3.2-3b
# shape, 90K history, E = 4, M = 8,192, blocks of 2,048; `bench/profile_summary.py --gaps 0.1`)
# beside the dense chunked prefill of the same shape (blocks of 2,048: what a block forward costs
# with no budget, the step's floor on this runtime).
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-steps/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
STEPS=${STEPS:-60-72}
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL" $R/gpu_checks.log | head -20
gzip -f $R/gpu_checks.log $R/gpu_checks.json
for n in 8192 16384; do
  timeout 60 $CLI bench prefill --shape llama3.2-3b --device cuda --dtype bf16 --tokens $n \
    --chunk 2048 --repeat 2 --policy full --json $R/prefill-dense-$n.json > $R/prefill-dense-$n.log 2>&1
  echo "dense prefill $n rc=$? $(tail -1 $R/prefill-dense-$n.log) at ${SECONDS}s"
done
pack
timeout 200 $CLI bench epicache --shape llama3.2-3b \
  --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 \
  --kv-budget 8192 --decode-tokens 8 --methods epicache-prepared --policy epicache:embed=1 \
  --history-tokens 90000 --turns 1 --profile /tmp/prof-steps.json --profile-steps $STEPS \
  --json $R/prepare-profiled.json > /dev/null 2> $R/prepare-profiled.err
echo "profiled run rc=$? at ${SECONDS}s"
python3 bench/profile_summary.py /tmp/prof-steps.json --top 45 --gaps 0.1 > $R/profile-steps-$STEPS.txt 2>&1
head -60 $R/profile-steps-$STEPS.txt
gzip -c /tmp/prof-steps.json > $OUT/prof-steps-$STEPS.trace.json.gz
gzip -f $R/*.err
pack
echo "done at ${SECONDS}s"
