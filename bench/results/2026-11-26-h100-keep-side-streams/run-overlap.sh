#!/usr/bin/env bash
set -uo pipefail
mkdir -p $OUT/b && (OUT=$OUT/b; DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
for m in llama-gqa qwen2-bias-tied qwen3-qknorm; do
  timeout 120 $CLI bench keep --model tests/data/models/$m --device cuda --dtype f32 --segments 6,12 \
    --segment-tokens-min 5 --segment-tokens-max 12 --prefix-tokens 4 --query-tokens 4 \
    --chunk-tokens 16 --changed 2 --page-tokens 4 --repeat 1 --check --json $OUT/check-$m.json > /dev/null 2>&1
  echo "check $m rc=$?"
done
python3 - $OUT <<'PY'
import json, glob, os, sys
worst = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "check-*.json"))):
    for row in json.load(open(f))["rows"]:
        for name, m in row["methods"].items():
            for k, v in m.items():
                if not k.startswith("check"): continue
                if isinstance(v, bool): worst[k] = worst.get(k, True) and v
                else: worst[k] = max(worst.get(k, 0), v)
print("checks (worst over fixtures and methods):", worst)
PY
for inv in ${INVS:-serial overlapped}; do
  ENGRAM_COMMIT=${ENGRAM_COMMIT:-} taskset -c 10,11 timeout 400 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments ${SEGMENTS:-40,30} \
    --repeat ${REPEAT:-7} --keep-options probe=8 --invalidation $inv ${EXTRA:-} --methods ${METHODS:-full-recompute,cacheblend,keep,keep-naive,full-reuse} \
    --json $OUT/ttft-$inv.json > $OUT/ttft-$inv.log 2>&1
  echo "invalidation $inv rc=$?"
  python3 - $OUT/ttft-$inv.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["rows"]:
    ms = r["methods"]
    print(r["segments"], {n: round(m["ttft_ms"], 1) for n, m in ms.items()}, "copy frac", round(r["copy"]["fraction_of_raw"], 3))
    if "keep" in ms and "full-recompute" in ms: print("  keep vs full %.2fx, vs cacheblend %.2fx, balanced vs naive %.2fx" % (ms["full-recompute"]["ttft_ms"] / ms["keep"]["ttft_ms"], ms["cacheblend"]["ttft_ms"] / ms["keep"]["ttft_ms"], ms["keep-naive"]["ttft_ms"] / ms["keep"]["ttft_ms"]))
    for n in ("keep", "cacheblend"):
        k = ms.get(n)
        if k: print("  %s parts" % n, {a: round(b, 2) for a, b in k["layer_parts_ms"].items()}, "inval", round(k["invalidation_ms"], 2), "busy", round(k["copy_busy_ms"], 1), "runs", [round(x, 1) for x in k["ttft_runs_ms"]], "wait", round(k["host_wait_ms"], 1), "between", round(k["between_layers_ms"], 2))
PY
done
