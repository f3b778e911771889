#!/usr/bin/env bash
# EpiCache routed by hashed word stems (`epicache:embed=1`, which the chat honours from this
# commit on) against the model's own states and prefix caching: 300 turns over a 90K history,
# llama3.2-3b shape (random weights: the model's states route at random, the stems by topic),
# 96-token replies, one machine. From the repository root with .device/ carried:
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-lexical-routing/run.sh lexical
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-lexical-routing/run.sh peers
# `lexical` builds engram-cli and engram-gpu-checks, runs the checks, then epicache-prepared
# under epicache:embed=1; `peers` (same warm machine) runs prefix caching and epicache-prepared
# under the default embedding.
set -uo pipefail
SECONDS=0
B=/tmp/engram-build
export SHAPE=llama3.2-3b DECODE=${DECODE:-96}
summary() {
  python3 - "$1/epicache-turns.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["methods"]
for k, v in m.items():
    b = v.get("between_turns", {})
    r = v.get("routed_episode_per_turn", [])
    switches = sum(1 for i in range(1, len(r)) if r[i] != r[i - 1])
    print("%-18s turns %.1f s  total %.1f s  before first turn %.1f s (%d steps)  between turns %.1f s (%d steps, %.0f ms/step)  device %.1f s  switches %d" % (
        k, v.get("turns_ms", v["total_ms"]) / 1000, v["total_ms"] / 1000,
        b.get("before_first_turn_ms", 0) / 1000, b.get("before_first_turn_steps", 0),
        b.get("ms", 0) / 1000, b.get("steps", 0), b.get("ms_per_step", 0),
        b.get("device_total_ms", v["total_ms"]) / 1000, switches))
    print("%-18s turn max %.0f ms p95 %.0f ms  decode %.2f ms/token  peak %.2f GB  stages %s" % (
        "", v["turn_wait"]["max_ms"], v["turn_wait"]["p95_ms"], v["decode_ms_per_token"],
        v["memory"].get("peak_bytes", 0) / 1e9,
        {s: round(x["ms"] / 1000, 2) for s, x in v.get("stages", {}).items()}))
PY
}
case ${1:?lexical or peers} in
lexical)
  (DEVICE_TARGETS=engram-gpu-checks bash bench/run_device_epicache.sh build | tail -1)
  echo "built at ${SECONDS}s"
  timeout 200 $B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
  echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log) at ${SECONDS}s"
  grep -E "FAIL" $OUT/gpu_checks.log | head -20
  mkdir -p $OUT/lexical
  OUT=$OUT/lexical METHODS="epicache-prepared:${LEXICAL_S:-300}" EXTRA="--policy epicache:embed=1" \
    bash bench/run_device_epicache.sh turns 2>&1 | tail -3
  summary $OUT/lexical
  ;;
peers)
  mkdir -p $OUT/model
  OUT=$OUT/model METHODS="${PEERS:-prefix:250 epicache-prepared:290}" \
    bash bench/run_device_epicache.sh turns 2>&1 | tail -3
  summary $OUT/model
  ;;
esac
echo "done at ${SECONDS}s"
rm -f $OUT/build.log $OUT/*/*.out
