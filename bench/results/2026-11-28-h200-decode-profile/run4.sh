#!/usr/bin/env bash
# The decode attention launched dependent on rope_kv_write in the recorded step (after_kv_write:
# the first tile's other rows copied while rope_kv_write runs) against plain launches
# (ENGRAM_DECODE_ATTENTION_PLAIN_LAUNCH=1, the same build): the kernel's checks (with the new
# after-rope_kv_write graph rows), the recorded step's ms/token alternating, every GPU check.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h200-decode-profile/run4.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 100 $B/bench/engram-gpu-checks --only decode_attention --json $R/da.json > $R/da.log 2>&1
echo "decode_attention checks rc=$? PASS $(grep -c PASS $R/da.log) FAIL $(grep -c FAIL $R/da.log)"
grep -E "FAIL|after rope|3B shape" $R/da.log | sed 's/, eager.*//'
dec() {  # mode shape slots
  unset ENGRAM_DECODE_ATTENTION_PLAIN_LAUNCH
  [ $1 = plain ] && export ENGRAM_DECODE_ATTENTION_PLAIN_LAUNCH=1
  timeout 120 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 --decode-tokens 256 \
    --repeat 3 --policy full --json $R/decode-$2-$3-$1-$4.json > $R/decode-$2-$3-$1-$4.log 2>&1
  echo "$2 $3 $1 rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token' % d['per_token_latency_ms'])" $R/decode-$2-$3-$1-$4.json 2>/dev/null) at ${SECONDS}s"
}
for round in 1 2; do
  dec early llama3.2-3b 10240 $round
  dec plain llama3.2-3b 10240 $round
done
dec early llama3.2-3b 90000 1
dec plain llama3.2-3b 90000 1
dec early llama3.1-8b 32768 1
dec plain llama3.1-8b 32768 1
unset ENGRAM_DECODE_ATTENTION_PLAIN_LAUNCH
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep FAIL $R/gpu_checks.log | head
gzip -f $R/*.log $R/gpu_checks.json
pack
