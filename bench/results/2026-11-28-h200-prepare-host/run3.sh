#!/usr/bin/env bash
# The decode GEMV in rounds of eight 16-byte chunks a lane and a GLU's gate and up rows in the
# same rounds, against the kernel before (ENGRAM_DECODE_LINEAR_ROUNDS4=1, same build): the
# decode_linear checks in both modes, every GPU check, the recorded step's ms/token alternating
# the modes (3B at 10,240 and 90,000 slots, 8B at 32,768), and a Kineto trace of the 3B step.
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-host/run3.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 100 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|TIME decode_linear" $R/gpu_checks.log | head -20
ENGRAM_DECODE_LINEAR_ROUNDS4=1 timeout 60 $B/bench/engram-gpu-checks --only decode_linear > $R/dl-rounds4.log 2>&1
echo "rounds4 checks rc=$? PASS $(grep -c PASS $R/dl-rounds4.log) FAIL $(grep -c FAIL $R/dl-rounds4.log)"
grep -E "TIME decode_linear" $R/dl-rounds4.log | head -8
gzip -f $R/gpu_checks.log $R/gpu_checks.json $R/dl-rounds4.log
step() {  # name shape slots [env]
  env ${4:-X=0} timeout 60 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 \
    --decode-tokens 256 --repeat 3 --policy full --json $R/$1.json > $R/$1.log 2>&1
  echo "$1 rc=$? $(python3 -c "import json,sys; print('%.3f ms/token' % json.load(open(sys.argv[1]))['per_token_latency_ms'])" $R/$1.json 2>/dev/null) at ${SECONDS}s"
}
for round in 1 2; do
  for c in "3b-10240 llama3.2-3b 10240" "3b-90000 llama3.2-3b 90000" "8b-32768 llama3.1-8b 32768"; do
    set -- $c
    step $1-r$round-new $2 $3
    step $1-r$round-rounds4 $2 $3 ENGRAM_DECODE_LINEAR_ROUNDS4=1
  done
done
timeout 60 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens 10240 \
  --decode-tokens 32 --repeat 1 --policy full --profile /tmp/d.trace.json --json $R/profiled.json > $R/profiled.log 2>&1
python3 bench/kernel_times.py /tmp/d.trace.json > $R/decode-3b-10240-kernels.txt 2>&1
gzip -c /tmp/d.trace.json > $R/decode-3b-10240.trace.json.gz
gzip -f $R/*.log
pack
