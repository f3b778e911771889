#!/usr/bin/env bash
# The session's last code (rows selected whole in KvWorkingSet::gather_per_head; the review
# commit): every GPU check (slots_plan times the apply at the 8B shape), then the 32K prefill
# under --kv-budget 8192 of the uniform and the ragged set traced on the device clock, and their
# time to first token (llama3.1-8b shape, random weights, bf16, 32K in / 64 out).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-device-plans/run3.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|as slots" $R/gpu_checks.log | head -12
RAGGED="epicache:per_head=2,patch=2,layers=$(python3 -c "print(','.join(['6144']*32))")"
for what in uniform ragged; do
  spec="epicache:patch=2"; [ $what = ragged ] && spec="$RAGGED"
  timeout 100 $CLI bench prefill --shape llama3.1-8b --device cuda --dtype bf16 --tokens 32768 \
    --repeat 2 --policy "$spec" --kv-budget 8192 --json $R/prefill-$what.json \
    --trace $R/trace-$what.jsonl > $R/prefill-$what.log 2>&1
  echo "prefill $what rc=$? $(grep -o '"tokens_per_s_runs":[^]]*]' $R/prefill-$what.json) at ${SECONDS}s"
  python3 bench/trace_gaps.py $R/trace-$what.jsonl | tee $R/gaps-$what.txt
  gzip -f $R/trace-$what.jsonl
  run_decode in32k-$what 32768 64 "$spec" --kv-budget 8192
done
pack
