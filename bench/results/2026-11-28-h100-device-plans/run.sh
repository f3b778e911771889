#!/usr/bin/env bash
# EpiCache's plans applied where they were ranked (KeepPlan::slots): every GPU check (the new
# slots_plan rows: a plan as device slots against the same plan as host lists, bit for bit, and
# both applies timed at the 8B shape); then the 32K prefill under --kv-budget 8192 (llama3.1-8b
# shape, random weights, bf16) of the uniform (per-head) set and the ragged per_head=2 set, each
# with device plans and with the host lists (ENGRAM_HOST_PLAN_LISTS=1, same build), traced on the
# device clock (bench/trace_gaps.py), and full KV; then the time to first token and decode of
# both sets (32K in / 64 out).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-device-plans/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|as slots|joint selection" $R/gpu_checks.log | head -12
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
for what in uniform uniform-host ragged ragged-host full; do
  spec="epicache:patch=2"; budget="--kv-budget 8192"; host=0
  case $what in ragged*) spec="epicache:per_head=2,patch=2,layers=$LAYERS" ;; esac
  case $what in *-host) host=1 ;; esac
  [ $what = full ] && { spec=full; budget=""; }
  ENGRAM_HOST_PLAN_LISTS=$host timeout 120 $CLI bench prefill --shape llama3.1-8b --device cuda \
    --dtype bf16 --tokens 32768 --repeat 2 --policy "$spec" $budget --json $R/prefill-$what.json \
    --trace $R/trace-$what.jsonl > $R/prefill-$what.log 2>&1
  echo "prefill $what rc=$? $(grep -o '"tokens_per_s_runs":[^]]*]' $R/prefill-$what.json) at ${SECONDS}s"
  python3 bench/trace_gaps.py $R/trace-$what.jsonl | tee $R/gaps-$what.txt
  gzip -f $R/trace-$what.jsonl
done
run_decode in32k-uniform 32768 64 "epicache:patch=2" --kv-budget 8192
ENGRAM_HOST_PLAN_LISTS=1 run_decode in32k-uniform-host 32768 64 "epicache:patch=2" --kv-budget 8192
run_decode in32k-ragged 32768 64 "epicache:per_head=2,patch=2,layers=$LAYERS" --kv-budget 8192
pack
