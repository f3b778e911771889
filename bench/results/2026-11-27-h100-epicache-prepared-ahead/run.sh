#!/usr/bin/env bash
# EpiCache with its work done while nobody waits, before the first turn too (the history indexed,
# clustered and every episode built, as the app does after a long conversation is opened),
# against prefix caching: 300 turns over a 90K history, llama3.2-3b shape, from the repository
# root with .device/ carried. Two calls on one warm machine:
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-prepared-ahead/run.sh checks
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-prepared-ahead/run.sh turns
set -uo pipefail
SECONDS=0
B=/tmp/engram-build
case ${1:?checks or turns} in
checks)
  (DEVICE_TARGETS=engram-gpu-checks bash bench/run_device_epicache.sh build | tail -1)
  echo "built at ${SECONDS}s"
  timeout 240 $B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
  echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log) at ${SECONDS}s"
  grep -E "FAIL" $OUT/gpu_checks.log | head -20
  ;;
turns)
  SHAPE=llama3.2-3b METHODS="${METHODS:-epicache-prepared:260 prefix:150}" \
    bash bench/run_device_epicache.sh turns 2>&1 | tail -8
  echo "done at ${SECONDS}s"
  python3 - "$OUT/epicache-turns.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["methods"]
for k, v in m.items():
    b = v.get("between_turns", {})
    print("%-18s turns %.1f s  total %.1f s  before first turn %.1f s (%d steps)  between turns %.1f s (%d steps, %.0f ms/step)  device %.1f s" % (
        k, v.get("turns_ms", v["total_ms"]) / 1000, v["total_ms"] / 1000,
        b.get("before_first_turn_ms", 0) / 1000, b.get("before_first_turn_steps", 0),
        b.get("ms", 0) / 1000, b.get("steps", 0), b.get("ms_per_step", 0),
        b.get("device_total_ms", v["total_ms"]) / 1000))
    print("%-18s turn max %.0f ms p95 %.0f ms  decode %.2f ms/token  peak %.2f GB  first turn %.0f ms" % (
        "", v["turn_wait"]["max_ms"], v["turn_wait"]["p95_ms"], v["decode_ms_per_token"],
        v["memory"].get("peak_bytes", 0) / 1e9, v["turn_ms"][0]))
PY
  rm -f $OUT/build.log $OUT/*.out
  ;;
esac
