#!/usr/bin/env bash
# Issue 15, one GPU machine (session 25, call 5): the one-row decode GEMV with its registers capped
# for eight blocks an SM (one wave for the 3B shape's gate/up) against the uncapped kernel
# (ENGRAM_DECODE_LINEAR_40_REGISTERS=1) in the same build, alternating: checks in both modes, the
# recorded 3B step at 10,240 and 90,000 slots and the 8B step at 32,768; the kernel trace at 10K.
#   ENGRAM_COMMIT=<sha> bash bench/results/2026-11-28-h200-prepare-steps/run5.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
for mode in capped uncapped; do
  [ $mode = uncapped ] && export ENGRAM_DECODE_LINEAR_40_REGISTERS=1 || unset ENGRAM_DECODE_LINEAR_40_REGISTERS
  timeout 60 $B/bench/engram-gpu-checks --only decode_linear > $R/dl-$mode.log 2>&1
  echo "decode_linear checks $mode rc=$? PASS $(grep -c PASS $R/dl-$mode.log) FAIL $(grep -c FAIL $R/dl-$mode.log)"
  gzip -f $R/dl-$mode.log
done
one() {  # name shape tokens mode
  [ $4 = uncapped ] && export ENGRAM_DECODE_LINEAR_40_REGISTERS=1 || unset ENGRAM_DECODE_LINEAR_40_REGISTERS
  timeout 90 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 --decode-tokens 256 \
    --repeat 2 --policy full --json $R/$1-$4.json > $R/$1-$4.log 2>&1
  echo "$1 $4 rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.4f ms/token' % d['per_token_latency_ms'])" $R/$1-$4.json) at ${SECONDS}s"
}
for rep in 1 2; do
  for mode in capped uncapped; do one 3b-10240-r$rep llama3.2-3b 10240 $mode; done
  for mode in uncapped capped; do one 3b-90000-r$rep llama3.2-3b 90000 $mode; done
done
for mode in capped uncapped; do one 8b-32768 llama3.1-8b 32768 $mode; done
pack
unset ENGRAM_DECODE_LINEAR_40_REGISTERS
timeout 90 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens 10240 \
  --decode-tokens 32 --repeat 1 --policy full --profile /tmp/decode-3b-10240.trace.json \
  --json $R/decode-3b-10240-profiled.json > $R/decode-3b-10240-profiled.log 2>&1
python3 bench/kernel_times.py /tmp/decode-3b-10240.trace.json > $R/decode-3b-10240-kernels.txt 2>&1
head -30 $R/decode-3b-10240-kernels.txt | tail -22
gzip -f $R/*.log
pack
echo "done at ${SECONDS}s"
