#!/usr/bin/env bash
# Issue 15, one GPU machine (session 25, calls 3 and 4): every GPU check (the argmax in two
# passes, the prefill RMSNorm in torch's order bit for bit); the recorded 3B decode step at
# 10,240 and 90,000 slots and its kernel trace at 10,240; preparation steps 60-72 profiled again
# (the norms now three launches); 300 turns over a 90K history with EpiCache (epicache:embed=1,
# epicache-prepared). Prefix caching on the same machine right after: run4.sh.
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-steps/run3.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|prefill elementwise|argmax rows 1 vocab 128256" $R/gpu_checks.log | head -40
gzip -f $R/gpu_checks.log $R/gpu_checks.json
for n in 10240 90000; do
  timeout 90 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens $n \
    --decode-tokens 256 --repeat 2 --policy full --json $R/decode-3b-$n.json > $R/decode-3b-$n.log 2>&1
  echo "decode 3b $n rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.4f ms/token' % d['per_token_latency_ms'])" $R/decode-3b-$n.json) at ${SECONDS}s"
done
timeout 90 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens 10240 \
  --decode-tokens 32 --repeat 1 --policy full --profile /tmp/decode-3b-10240.trace.json \
  --json $R/decode-3b-10240-profiled.json > $R/decode-3b-10240-profiled.log 2>&1
python3 bench/kernel_times.py /tmp/decode-3b-10240.trace.json > $R/decode-3b-10240-kernels.txt 2>&1
head -16 $R/decode-3b-10240-kernels.txt
timeout 120 $CLI bench epicache --shape llama3.2-3b \
  --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 \
  --kv-budget 8192 --decode-tokens 8 --methods epicache-prepared --policy epicache:embed=1 \
  --history-tokens 90000 --turns 1 --profile /tmp/prof-steps.json --profile-steps 60-72 \
  --json $R/prepare-profiled.json > /dev/null 2> $R/prepare-profiled.err
echo "profiled steps rc=$? at ${SECONDS}s"
python3 bench/profile_summary.py /tmp/prof-steps.json --top 30 --gaps 0.1 > $R/profile-steps-60-72.txt 2>&1
head -3 $R/profile-steps-60-72.txt
pack
SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:$((580 - SECONDS))" \
  EXTRA="--policy epicache:embed=1" OUT=$R bash bench/run_device_epicache.sh turns 2>&1 | tail -3
echo "epicache at ${SECONDS}s"
rm -f $R/*.out
gzip -f $R/*.err
pack
