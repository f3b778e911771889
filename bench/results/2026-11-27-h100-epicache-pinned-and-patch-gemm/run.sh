#!/usr/bin/env bash
# EpiCache's preparation after the exact-size pinned episode pool and the patch scores' tensor-core
# GEMM: the GPU checks, the preparation steps profiled, 300 turns over a 90K history with
# `epicache:embed=1` (`main`), then prefix caching and EpiCache with the model's states on the
# same warm machine (`peers`). llama3.2-3b shape, bf16, random weights, 96-token replies.
# From the repository root with .device/ carried:
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-pinned-and-patch-gemm/run.sh main
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-pinned-and-patch-gemm/run.sh peers
#   ENGRAM_COMMIT=<sha> OUT=$OUT bash bench/results/2026-11-27-h100-epicache-pinned-and-patch-gemm/run.sh final
set -uo pipefail
SECONDS=0
B=/tmp/engram-build
HERE=bench/results/2026-11-27-h100-epicache-lexical-routing
case ${1:?main, peers or final} in
main)
  OUT=$OUT STEPS=${STEPS:-60-72} bash bench/results/2026-11-27-h100-epicache-steps-and-hf-peer/run.sh profile
  mkdir -p $OUT/lexical
  OUT=$OUT/lexical SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:${LEXICAL_S:-300}" \
    EXTRA="--policy epicache:embed=1" bash bench/run_device_epicache.sh turns 2>&1 | tail -3
  ;;
final)
  # engram-cli only (the GPU checks ran at every earlier call; the change since is host code), then
  # epicache:embed=1 and prefix caching on the same machine.
  (bash bench/run_device_epicache.sh build | tail -1)
  echo "built at ${SECONDS}s"
  mkdir -p $OUT/lexical $OUT/model
  OUT=$OUT/lexical SHAPE=llama3.2-3b DECODE=96 METHODS="epicache-prepared:${LEXICAL_S:-220}" \
    EXTRA="--policy epicache:embed=1" bash bench/run_device_epicache.sh turns 2>&1 | tail -2
  OUT=$OUT/model SHAPE=llama3.2-3b DECODE=96 METHODS="prefix:250" \
    bash bench/run_device_epicache.sh turns 2>&1 | tail -2
  ;;
peers)
  mkdir -p $OUT/model
  OUT=$OUT/model SHAPE=llama3.2-3b DECODE=96 METHODS="${PEERS:-prefix:250 epicache-prepared:290}" \
    bash bench/run_device_epicache.sh turns 2>&1 | tail -3
  ;;
esac
for f in $OUT/*/epicache-turns.json; do
  python3 - "$f" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["methods"]
for k, v in m.items():
    b = v.get("between_turns", {})
    h = b.get("before_first_turn_host", {})
    print("%-18s turns %.1f s  before first turn %.1f s (%d steps; switch %.1f s, index %.1f s)  between %.1f s (%d steps)  device %.1f s  decode %.2f ms/token  peak %.2f GB  p95 %.0f ms" % (
        k, v["total_ms"] / 1000, b.get("before_first_turn_ms", 0) / 1000, b.get("before_first_turn_steps", 0),
        h.get("switch_ms", 0) / 1000, h.get("index_ms", 0) / 1000, b.get("ms", 0) / 1000, b.get("steps", 0),
        b.get("device_total_ms", v["total_ms"]) / 1000, v["decode_ms_per_token"],
        v["memory"].get("peak_bytes", 0) / 1e9, v["turn_wait"]["p95_ms"]))
PY
done
echo "done at ${SECONDS}s"
rm -f $OUT/build.log $OUT/*/*.out
