#!/usr/bin/env bash
# The paged pool's gather kernel with four 16-byte loads in flight per thread (default) against one
# (ENGRAM_PAGE_COPY_ONE_LOAD=1, the kernel before), in one call on one machine: the pooled
# prefill's exactness rows (bench keep --check on three f32 fixtures), bench pages, and KEEP's
# TTFT at 40 segments on the qwen2.5-14b shape with the loader's copy throughput.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-page-copy-loads/run.sh
set -uo pipefail
SECONDS=0
mkdir -p $OUT/b && (OUT=$OUT/b; source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
echo "built at ${SECONDS}s"
for m in llama-gqa qwen2-bias-tied qwen3-qknorm; do
  timeout 120 $CLI bench keep --model tests/data/models/$m --device cuda --dtype f32 --segments 6,12 \
    --segment-tokens-min 5 --segment-tokens-max 12 --prefix-tokens 4 --query-tokens 4 \
    --chunk-tokens 16 --changed 2 --page-tokens 4 --repeat 1 --check \
    --methods full-recompute,full-reuse,cacheblend,keep,keep-naive,keep-serial \
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
for kernel in one four; do
  flag=""; [ $kernel = one ] && flag="ENGRAM_PAGE_COPY_ONE_LOAD=1"
  env $flag taskset -c 10,11 timeout 60 $CLI bench pages --shape qwen2.5-14b --device cuda --dtype bf16 \
    --units 40 --unit-tokens 100 --page-tokens 16 --repeat 9 --json $OUT/pages-$kernel.json > $OUT/pages-$kernel.log 2>&1
  echo "pages $kernel rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('copy %.2f ms (%.1f GB/s) raw %.2f ms (%.1f GB/s): %.3f of raw' % (d['copy_ms'], d['copy_gbps'], d['raw_copy_ms'], d['raw_copy_gbps'], d['copy_fraction_of_raw']))" $OUT/pages-$kernel.json 2>/dev/null)"
done
for pass in first second; do
  for kernel in one four; do
    flag=""; [ $kernel = one ] && flag="ENGRAM_PAGE_COPY_ONE_LOAD=1"
    env $flag taskset -c 10,11 timeout 200 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments 40 \
      --repeat ${REPEAT:-5} --keep-options probe=8 --methods full-recompute,cacheblend,keep,keep-naive \
      --json $OUT/ttft-$kernel-$pass.json > $OUT/ttft-$kernel-$pass.log 2>&1
    echo "ttft $kernel $pass rc=$? at ${SECONDS}s"
    python3 - $OUT/ttft-$kernel-$pass.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    ms = r["methods"]
    f, c, n, k = (ms[x]["ttft_ms"] for x in ("full-recompute", "cacheblend", "keep-naive", "keep"))
    print("  %d segments: full %.1f, cacheblend %.1f, keep %.1f (%.2fx full, %.2fx cacheblend), naive %.1f (balanced %.2fx); copies %.3f of raw (loader %.2f ms, raw %.2f ms); keep copy busy %.1f ms" % (
        r["segments"], f, c, k, f / k, c / k, n, n / k, r["copy"]["fraction_of_raw"], r["copy"]["loader_ms"], r["copy"]["raw_ms"], ms["keep"]["copy_busy_ms"]))
PY
  done
done
rm -f $OUT/build.log
