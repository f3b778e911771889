#!/usr/bin/env bash
# EpiCache with the waiting episodes prepared between turns (epicache-prepared) against EpiCache
# as before and prefix caching, 300 turns over a 90K history, llama3.2-3b shape, one call on one
# machine, from the repository root with .device/ carried.
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-prepared/run.sh
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1); echo "built at ${SECONDS}s"
SHAPE=llama3.2-3b METHODS="${METHODS:-epicache-prepared:220 prefix:150 epicache:200}" \
  bash bench/run_device_epicache.sh turns 2>&1 | tail -12
echo "done at ${SECONDS}s"
python3 - "$OUT/epicache-turns.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["methods"]
for k, v in m.items():
    b = v.get("between_turns", {})
    print("%-18s turns %.1f s  between turns %.1f s (%d steps)  turn max %.0f ms p95 %.0f ms  decode %.2f ms/token" % (
        k, v["total_ms"] / 1000, b.get("ms", 0) / 1000, b.get("steps", 0),
        v["turn_wait"]["max_ms"], v["turn_wait"]["p95_ms"], v["decode_ms_per_token"]))
PY
rm -f $OUT/build.log $OUT/*.out
