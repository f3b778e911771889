#!/usr/bin/env bash
# The decode attention's combine done by the last partial block of each row and head (no combine
# kernel) against the combine kernel (ENGRAM_DECODE_ATTENTION_COMBINE_KERNEL=1, same build): the
# decode_attention checks in both modes, every GPU check, the recorded step's ms/token alternating
# the modes. Packs after each stage (the session's device time is nearly spent).
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-host/run6.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 40 $B/bench/engram-gpu-checks --only decode_attention > $R/da-fused.log 2>&1
echo "fused checks rc=$? PASS $(grep -c PASS $R/da-fused.log) FAIL $(grep -c FAIL $R/da-fused.log) at ${SECONDS}s"
ENGRAM_DECODE_ATTENTION_COMBINE_KERNEL=1 timeout 40 $B/bench/engram-gpu-checks --only decode_attention > $R/da-kernel.log 2>&1
echo "combine-kernel checks rc=$? PASS $(grep -c PASS $R/da-kernel.log) FAIL $(grep -c FAIL $R/da-kernel.log) at ${SECONDS}s"
grep -E "FAIL" $R/da-fused.log | head -5
grep -E "TIME" $R/da-fused.log | head -4; grep -E "TIME" $R/da-kernel.log | head -4
pack
step() {  # name shape slots [env]
  env ${4:-X=0} timeout 40 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 \
    --decode-tokens 256 --repeat 3 --policy full --json $R/$1.json > $R/$1.log 2>&1
  echo "$1 rc=$? $(python3 -c "import json,sys; print('%.3f ms/token' % json.load(open(sys.argv[1]))['per_token_latency_ms'])" $R/$1.json 2>/dev/null) at ${SECONDS}s"
}
for c in "3b-10240 llama3.2-3b 10240" "8b-32768 llama3.1-8b 32768" "3b-10240b llama3.2-3b 10240"; do
  set -- $c
  step $1-fused $2 $3
  step $1-kernel $2 $3 ENGRAM_DECODE_ATTENTION_COMBINE_KERNEL=1
done
pack
timeout 70 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep FAIL $R/gpu_checks.log | head -5
gzip -f $R/*.log
pack
