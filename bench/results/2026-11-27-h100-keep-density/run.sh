#!/usr/bin/env bash
# KEEP's units scored by average attention (the new default) against attention mass (keep-mass)
# on the GPU benchmark, with every GPU check and the pooled prefill's exactness rows first.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-keep-density/run.sh
set -uo pipefail
SECONDS=0
mkdir -p $OUT/b && (OUT=$OUT/b; DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log) at ${SECONDS}s"
grep FAIL $OUT/gpu_checks.log | head
for m in llama-gqa qwen2-bias-tied qwen3-qknorm; do
  timeout 120 $CLI bench keep --model tests/data/models/$m --device cuda --dtype f32 --segments 6,12 \
    --segment-tokens-min 5 --segment-tokens-max 12 --prefix-tokens 4 --query-tokens 4 \
    --chunk-tokens 16 --changed 2 --page-tokens 4 --repeat 1 --check \
    --methods full-recompute,full-reuse,cacheblend,keep,keep-mass,keep-naive,keep-serial \
    --json $OUT/check-$m.json > /dev/null 2>&1
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
for pass in first second; do
  taskset -c 10,11 timeout 300 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments ${SEGMENTS:-40,30} \
    --repeat ${REPEAT:-7} --keep-options probe=8 \
    --methods full-recompute,cacheblend,keep,keep-mass,keep-naive,full-reuse \
    --json $OUT/ttft-$pass.json > $OUT/ttft-$pass.log 2>&1
  echo "ttft $pass rc=$? at ${SECONDS}s"
  python3 - $OUT/ttft-$pass.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["rows"]:
    ms = r["methods"]
    print(r["segments"], r["prompt_tokens"], {n: round(m["ttft_ms"], 1) for n, m in ms.items()}, "copy frac", round(r["copy"]["fraction_of_raw"], 3))
    f, c, n = ms["full-recompute"]["ttft_ms"], ms["cacheblend"]["ttft_ms"], ms["keep-naive"]["ttft_ms"]
    for k in ("keep", "keep-mass"):
        t = ms[k]["ttft_ms"]
        print("  %s: vs full %.2fx, vs cacheblend %.2fx, recomputed %.3f, units %d, invalidation %.1f ms, layers %.1f ms, copy busy %.1f ms" % (
            k, f / t, c / t, ms[k]["recompute_ratio"], ms[k]["units"], ms[k]["invalidation_ms"], ms[k]["layers_ms"], ms[k]["copy_busy_ms"]))
    print("  balanced vs naive %.2fx; cacheblend recomputed %.3f" % (n / ms["keep"]["ttft_ms"], ms["cacheblend"]["recompute_ratio"]))
PY
done
rm -f $OUT/build.log
cd $OUT && tar czf all.tgz *.json *.log *.txt && rm -f *.json
