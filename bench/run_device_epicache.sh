#!/usr/bin/env bash
# Issue 15, EpiCache's efficiency analysis (paper §4.3, Table 3) on the GPU machine: the
# llama3.1-8b shape (random weights, bf16, 128K positions), text tokenized with the Llama-2
# SentencePiece tokenizer of tests/data (its 32k ids are valid rows of the shape's 128k
# embedding; its folder gives the chat template, as for bench restore). One step per call, each
# well under the 10-minute limit of a device command:
#   build   engram-cli against the machine's PyTorch (bench/device_build.sh; ~2-3 min, kept in
#           /tmp/engram-build while the machine stays warm)
#   sweep   peak GPU memory and time of building one episode cache (block prefill under
#           M = 8192) vs a full prefill, histories of 10K-100K tokens
#   turns   90K-token history + 300 turns: epicache, prefix caching, full re-prefill (3 turns
#           measured, projected x 300), one engram-cli run per method so that a slow method
#           leaves the others' JSON; a last step puts them in one file with the ratios
#   hf      the Hugging Face transformers peer of one full re-prefill turn: prefill of HISTORY
#           tokens + DECODE greedy tokens, same shape, bf16, SDPA (bench/peers/hf_bench.py)
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/run_device_epicache.sh build|sweep|turns|hf
# Env: SHAPE (llama3.1-8b; llama3.2-3b is the paper's Table 3 model), TURNS (300), HISTORY
#      (90000), BUDGET (8192), DECODE (32), FULL_TURNS (3), SWEEP (10000,25000,50000,75000,100000),
#      METHODS (epicache:250 prefix:210 full:120: method:seconds), EXTRA (more flags for every
#      method, e.g. --profile P --profile-turns 100-104). Results in $OUT/epicache-*.json.
set -uo pipefail
STEP=${1:?build, sweep or turns}
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
B=${B:-/tmp/engram-build}
CLI=$B/app/cli/engram-cli
TURNS=${TURNS:-300}
HISTORY=${HISTORY:-90000}
BUDGET=${BUDGET:-8192}
DECODE=${DECODE:-32}
FULL_TURNS=${FULL_TURNS:-3}
SWEEP=${SWEEP:-10000,25000,50000,75000,100000}
SHAPE=${SHAPE:-llama3.1-8b}
METHODS=${METHODS:-epicache:250 prefix:210 full:120}
COMMON="--shape $SHAPE --tokenizer tests/data/models/llama-gqa/tokenizer.model --device cuda
  --dtype bf16 --kv-budget $BUDGET --decode-tokens $DECODE"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt" 2>&1
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> "$OUT/device.txt"

case $STEP in
build)
  source bench/device_build.sh
  ;;
sweep)
  [ -x "$CLI" ] || { echo "no $CLI: run the build step first (on the same warm machine)"; exit 1; }
  # --methods '' : the sweep alone (the short history is only the warm-up's).
  timeout 570 $CLI bench epicache $COMMON --methods '' --history-tokens 2000 --turns 1 \
    --sweep "$SWEEP" --json "$OUT/epicache-sweep.json" > "$OUT/epicache-sweep.out" 2> "$OUT/epicache-sweep.err"
  echo "sweep rc=$?"
  tail -8 "$OUT/epicache-sweep.err"
  ;;
turns)
  [ -x "$CLI" ] || { echo "no $CLI: run the build step first (on the same warm machine)"; exit 1; }
  # Seconds per method within the command's 10 minutes (model init + history ~20 s each).
  for spec in $METHODS; do
    m=${spec%%:*}
    timeout ${spec##*:} $CLI bench epicache $COMMON --methods $m --history-tokens $HISTORY \
      --turns $TURNS --full-turns $FULL_TURNS ${EXTRA:-} --json "$OUT/epicache-turns-$m.json" \
      > "$OUT/epicache-turns-$m.out" 2> "$OUT/epicache-turns-$m.err"
    echo "$m rc=$?"
    grep -v "turn [0-9]" "$OUT/epicache-turns-$m.err" | tail -3
  done
  python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
merged, methods = None, {}
for f in sorted(glob.glob(os.path.join(out, "epicache-turns-*.json"))):
    j = json.load(open(f))
    methods.update(j["methods"])
    merged = merged or j
if merged is None:
    sys.exit("no method finished")
merged["methods"] = methods
e, r = methods.get("epicache"), {}
def ratio(a, b):
    return a / b if b else 0.0
if e and "full" in methods:
    r["latency_full_projected_over_epicache"] = ratio(methods["full"]["projected_total_ms"], e["total_ms"])
    r["peak_memory_full_over_epicache"] = ratio(methods["full"]["memory"]["peak_bytes"], e["memory"]["peak_bytes"])
if e and "prefix" in methods:
    p = methods["prefix"]
    r["latency_prefix_over_epicache"] = ratio(p["total_ms"], e["total_ms"])
    r["decode_prefix_over_epicache"] = ratio(p["stages"]["decode"]["ms"], e["stages"]["decode"]["ms"])
    r["peak_memory_prefix_over_epicache"] = ratio(p["memory"]["peak_bytes"], e["memory"]["peak_bytes"])
merged["ratios"] = r
merged["merged_from"] = "one engram-cli bench epicache run per method (same flags), ratios as the CLI computes them"
json.dump(merged, open(os.path.join(out, "epicache-turns.json"), "w"), indent=2)
for m, v in methods.items():
    total = v.get("total_ms", v.get("projected_total_ms"))
    print(m, "total %.1f s" % (total / 1000), "peak %.2f GB" % (v["memory"]["peak_bytes"] / 1e9))
print(json.dumps(r))
PY
  ;;
hf)
  timeout 300 python3 bench/peers/hf_bench.py --shape $SHAPE --tokens $HISTORY --decode-tokens $DECODE \
    --repeat 1 --json "$OUT/hf-$SHAPE-$HISTORY.json" 2>&1 | grep -v Warning | tail -2
  ;;
*)
  echo "unknown step $STEP (build, sweep, turns or hf)"
  exit 2
  ;;
esac
