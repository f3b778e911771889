#!/usr/bin/env bash
# EpiCache's preparation steps profiled (the episodes' builds before the first turn, where the
# device idles) and the Hugging Face transformers peer of prefix caching on the Table 3 shape
# (llama3.2-3b, bf16, SDPA): its prefill and decode at the 300-turn run's first and last contexts
# (90,000 and 125,000 tokens: prefix caching's stream ends at 125,414 with 96-token replies) and
# its peak allocated bytes. From the repository root with .device/ carried:
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-steps-and-hf-peer/run.sh [profile|hf|all]
set -uo pipefail
SECONDS=0
B=/tmp/engram-build
STEPS=${STEPS:-60-72}
case ${1:-all} in
profile|all)
  (DEVICE_TARGETS=engram-gpu-checks bash bench/run_device_epicache.sh build | tail -1)
  echo "built at ${SECONDS}s"
  timeout 200 $B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
  echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log) at ${SECONDS}s"
  grep -E "FAIL" $OUT/gpu_checks.log | head -20
  timeout 200 $B/app/cli/engram-cli bench epicache --shape llama3.2-3b \
    --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda --dtype bf16 \
    --kv-budget 8192 --decode-tokens 8 --methods epicache-prepared --policy epicache:embed=1 \
    --history-tokens 90000 --turns 1 --profile /tmp/prof-steps.json --profile-steps $STEPS \
    --json $OUT/prepare-profiled.json > /dev/null 2> $OUT/prepare-profiled.err
  echo "profiled run rc=$? at ${SECONDS}s"
  python3 bench/profile_summary.py /tmp/prof-steps.json --top 40 --gaps 0.1 > $OUT/profile-steps-$STEPS.txt 2>&1
  head -30 $OUT/profile-steps-$STEPS.txt
  ;;&
hf|all)
  for n in 90000 125000; do
    timeout 240 python3 bench/peers/hf_bench.py --shape llama3.2-3b --tokens $n --decode-tokens 32 \
      --repeat 1 --json "$OUT/hf-llama3.2-3b-$n.json" 2>&1 | grep -v Warning | tail -1
    echo "hf $n rc=$? at ${SECONDS}s"
  done
  ;;
esac
echo "done at ${SECONDS}s"
rm -f $OUT/build.log
