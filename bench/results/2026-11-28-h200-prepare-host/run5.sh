#!/usr/bin/env bash
# The decode attention's partials with two tile buffers (the next tile streaming while this one is
# read) against one (ENGRAM_DECODE_ATTENTION_ONE_TILE=1, same build): every GPU check, the
# decode_attention checks and speed rows in both modes, the recorded step's ms/token alternating
# the modes, and a Kineto trace of the 3B step at 10,240 slots.
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-host/run5.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 100 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|TIME decode_attention" $R/gpu_checks.log | head -20
ENGRAM_DECODE_ATTENTION_ONE_TILE=1 timeout 60 $B/bench/engram-gpu-checks --only decode_attention > $R/da-one-tile.log 2>&1
echo "one-tile checks rc=$? PASS $(grep -c PASS $R/da-one-tile.log) FAIL $(grep -c FAIL $R/da-one-tile.log) at ${SECONDS}s"
grep -E "FAIL|TIME decode_attention" $R/da-one-tile.log | head -12
gzip -f $R/gpu_checks.log $R/gpu_checks.json $R/da-one-tile.log
step() {  # name shape slots [env]
  env ${4:-X=0} timeout 60 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 \
    --decode-tokens 256 --repeat 3 --policy full --json $R/$1.json > $R/$1.log 2>&1
  echo "$1 rc=$? $(python3 -c "import json,sys; print('%.3f ms/token' % json.load(open(sys.argv[1]))['per_token_latency_ms'])" $R/$1.json 2>/dev/null) at ${SECONDS}s"
}
for c in "3b-10240 llama3.2-3b 10240" "3b-90000 llama3.2-3b 90000" "8b-32768 llama3.1-8b 32768" "3b-10240b llama3.2-3b 10240"; do
  set -- $c
  step $1-two $2 $3
  step $1-one $2 $3 ENGRAM_DECODE_ATTENTION_ONE_TILE=1
done
timeout 60 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens 10240 \
  --decode-tokens 32 --repeat 1 --policy full --profile /tmp/d.trace.json --json $R/profiled.json > $R/profiled.log 2>&1
python3 bench/kernel_times.py /tmp/d.trace.json > $R/decode-3b-10240-kernels.txt 2>&1
head -8 $R/decode-3b-10240-kernels.txt
gzip -f $R/*.log
pack
