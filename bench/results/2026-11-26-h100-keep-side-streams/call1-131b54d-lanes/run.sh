#!/usr/bin/env bash
# one device call: build, gpu checks for attention runs, then KEEP TTFT under lanes x gather blocks
set -uo pipefail
mkdir -p $OUT/b && (OUT=$OUT/b; DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
timeout 120 $B/bench/engram-gpu-checks --only attention_runs --json $OUT/gpu-check-attention-runs.json 2>&1 | tail -3
for m in llama-gqa qwen3-qknorm; do
  timeout 120 $CLI bench keep --model tests/data/models/$m --device cuda --dtype f32 --segments 6,12 \
    --segment-tokens-min 5 --segment-tokens-max 12 --prefix-tokens 4 --query-tokens 4 \
    --chunk-tokens 16 --changed 2 --page-tokens 4 --repeat 1 --check --json $OUT/check-$m.json > $OUT/check-$m.log 2>&1
  echo "check $m rc=$?"
done
python3 - $OUT <<'PY'
import json, glob, os, sys
bad = 0
for f in sorted(glob.glob(os.path.join(sys.argv[1], "check-*.json"))):
    for row in json.load(open(f))["rows"]:
        for name, m in row["methods"].items():
            for k, v in m.items():
                if k.startswith("check") and isinstance(v, (int, float)) and v > 1e-4 and "packed" not in k: bad += 1; print(f, name, k, v)
print("check values over 1e-4:", bad)
PY
for combo in ${COMBOS:-1:32 4:32 8:32 4:16 4:8}; do
  l=${combo%%:*}; g=${combo##*:}
  ENGRAM_ATTENTION_LANES=$l ENGRAM_GATHER_BLOCKS=$g ENGRAM_COMMIT=${ENGRAM_COMMIT:-} taskset -c 10,11 timeout 300 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments ${SEGMENTS:-40} \
    --repeat ${REPEAT:-7} --keep-options probe=8 --methods ${METHODS:-full-recompute,cacheblend,keep,keep-naive} \
    --json $OUT/ttft-lanes$l-blocks$g.json > $OUT/ttft-lanes$l-blocks$g.log 2>&1
  echo "lanes $l blocks $g rc=$?"
  python3 - $OUT/ttft-lanes$l-blocks$g.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["rows"]:
    print(r["segments"], {n: round(m["ttft_ms"], 1) for n, m in r["methods"].items()}, "copy", r["copy"])
    k = r["methods"].get("keep")
    if k: print("  keep parts", {a: round(b, 2) for a, b in k["layer_parts_ms"].items()}, "inval", round(k["invalidation_ms"], 2), "busy", round(k["copy_busy_ms"], 1), "runs", [round(x, 1) for x in k["ttft_runs_ms"]], "wait", round(k["host_wait_ms"], 1), "between", round(k["between_layers_ms"], 2))
PY
done
