#!/usr/bin/env bash
# Decode attention with balanced runs over the slots in use (split count from the occupancy
# calculator; a G = 3 instance for groups of three) against the interleaved tiles before
# (ENGRAM_DECODE_ATTENTION_INTERLEAVED=1, the same build) and the balanced runs with G = 4
# (ENGRAM_DECODE_ATTENTION_G4=1): the kernel's checks and speed rows each way, then the recorded
# decode step's ms/token (3B at 10,240 and 90,000 slots, 8B at 32,768), alternating.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h200-decode-profile/run2.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
mode_env() {
  unset ENGRAM_DECODE_ATTENTION_INTERLEAVED ENGRAM_DECODE_ATTENTION_G4
  case $1 in
    interleaved) export ENGRAM_DECODE_ATTENTION_INTERLEAVED=1 ;;
    g4) export ENGRAM_DECODE_ATTENTION_G4=1 ;;
  esac
}
for mode in balanced interleaved g4; do
  mode_env $mode
  timeout 100 $B/bench/engram-gpu-checks --only decode_attention --json $R/da-$mode.json > $R/da-$mode.log 2>&1
  echo "$mode checks rc=$? PASS $(grep -c PASS $R/da-$mode.log) FAIL $(grep -c FAIL $R/da-$mode.log)"
  grep -E "FAIL|3B shape" $R/da-$mode.log | sed 's/, eager.*//'
done
dec() {  # mode shape slots
  mode_env $1
  timeout 120 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 --decode-tokens 256 \
    --repeat 3 --policy full --json $R/decode-$2-$3-$1.json > $R/decode-$2-$3-$1.log 2>&1
  echo "$2 $3 $1 rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token' % d['per_token_latency_ms'])" $R/decode-$2-$3-$1.json 2>/dev/null) at ${SECONDS}s"
}
for round in 1 2; do
  for mode in balanced interleaved; do
    dec $mode llama3.2-3b 10240
    dec $mode llama3.2-3b 90000
    dec $mode llama3.1-8b 32768
  done
done
dec g4 llama3.2-3b 10240
mode_env balanced
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep FAIL $R/gpu_checks.log | head
gzip -f $R/gpu_checks.log $R/gpu_checks.json $R/*.log
pack
