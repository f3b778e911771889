#!/usr/bin/env bash
# Joint selection ranked for every layer at once (f783d12): the GPU checks it touches
# (joint_selection: device against CPU; slots_plan), the ragged set's 32K prefill traced
# (per_head=2, layers=6144x32, --kv-budget 8192, llama3.1-8b shape, bf16) and its time to first
# token with and without decode-time retrieval (+louiskv:stride=16, 32K in / 512 out); then
# EpiCache routed by word stems (epicache:embed=1, epicache-prepared) over 300 turns of a 90K
# history (llama3.2-3b shape, 96-token replies), whose prefix-caching peer run2.sh peers runs on
# the same warm machine.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-device-plans/run2.sh ragged
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-device-plans/run2.sh peers
set -uo pipefail
case ${1:?ragged or peers} in
ragged)
  DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
  for only in joint_selection slots_plan; do
    timeout 60 $B/bench/engram-gpu-checks --only $only --json $R/gpu_checks-$only.json > $R/gpu_checks-$only.log 2>&1
    echo "gpu checks $only rc=$? PASS $(grep -c PASS $R/gpu_checks-$only.log) FAIL $(grep -c FAIL $R/gpu_checks-$only.log)"
  done
  grep -h "as slots" $R/gpu_checks-slots_plan.log
  RAGGED="epicache:per_head=2,patch=2,layers=$(python3 -c "print(','.join(['6144']*32))")"
  timeout 120 $CLI bench prefill --shape llama3.1-8b --device cuda --dtype bf16 --tokens 32768 \
    --repeat 2 --policy "$RAGGED" --kv-budget 8192 --json $R/prefill-ragged.json \
    --trace $R/trace-ragged.jsonl > $R/prefill-ragged.log 2>&1
  echo "prefill ragged rc=$? $(grep -o '"tokens_per_s_runs":[^]]*]' $R/prefill-ragged.json) at ${SECONDS}s"
  python3 bench/trace_gaps.py $R/trace-ragged.jsonl | tee $R/gaps-ragged.txt
  gzip -f $R/trace-ragged.jsonl
  run_decode in32k-ragged 32768 64 "$RAGGED" --kv-budget 8192
  run_decode in32k-ragged-louiskv 32768 512 "$RAGGED+louiskv:stride=16" --kv-budget 8192
  mkdir -p $R/lexical
  OUT=$R/lexical SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:300" \
    EXTRA="--policy epicache:embed=1" bash bench/run_device_epicache.sh turns 2>&1 | tail -2
  rm -f $R/lexical/*.out
  pack
  ;;
peers)
  OUT=$OUT SHAPE=llama3.2-3b DECODE=96 METHODS="prefix:290" bash bench/run_device_epicache.sh turns 2>&1 | tail -2
  rm -f $OUT/*.out
  ;;
esac
