#!/usr/bin/env bash
# Issue 15, one GPU machine (session 25, call 2): every GPU check (the new rope angles and argmax
# rows too); the recorded 3B decode step at 10,240 and 90,000 slots (ms/token) and a Kineto trace
# of it at 10,240 (`bench/kernel_times.py`); a Kineto trace of two turns that stay in their
# episode (turns 4 and 5 of the 300-turn run: 16 and 15 tokens in, 96 out) to see a turn's time
# outside its decode steps.
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-steps/run2.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|rope angles|argmax rows" $R/gpu_checks.log | head -40
gzip -f $R/gpu_checks.log $R/gpu_checks.json
for n in 10240 90000; do
  for rep in 1 2; do
    timeout 90 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens $n \
      --decode-tokens 256 --repeat 1 --policy full --json $R/decode-3b-$n-$rep.json > $R/decode-3b-$n-$rep.log 2>&1
    echo "decode 3b $n rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.4f ms/token' % d['per_token_latency_ms'])" $R/decode-3b-$n-$rep.json) at ${SECONDS}s"
  done
done
timeout 90 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens 10240 \
  --decode-tokens 32 --repeat 1 --policy full --profile /tmp/decode-3b-10240.trace.json \
  --json $R/decode-3b-10240-profiled.json > $R/decode-3b-10240-profiled.log 2>&1
python3 bench/kernel_times.py /tmp/decode-3b-10240.trace.json > $R/decode-3b-10240-kernels.txt 2>&1
head -24 $R/decode-3b-10240-kernels.txt
pack
timeout 200 $CLI bench epicache --shape llama3.2-3b \
  --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 \
  --kv-budget 8192 --decode-tokens 96 --methods epicache-prepared --policy epicache:embed=1 \
  --history-tokens 90000 --turns 7 --profile /tmp/prof-turns.json --profile-turns 4-6 \
  --json $R/turns-profiled.json > /dev/null 2> $R/turns-profiled.err
echo "profiled turns rc=$? at ${SECONDS}s"
python3 bench/profile_summary.py /tmp/prof-turns.json --top 30 --gaps 0.05 > $R/profile-turns-4-6.txt 2>&1
head -50 $R/profile-turns-4-6.txt
gzip -c /tmp/prof-turns.json > $OUT/prof-turns-4-6.trace.json.gz
gzip -f $R/*.err
pack
echo "done at ${SECONDS}s"
