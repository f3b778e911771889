#!/usr/bin/env bash
# Issue 16 (KEEP) on the GPU machine, in one call:
#  1. CUDA rows of the exactness tests (bench keep --check) on the f32 fixtures: the selective
#     prefill fed from the paged pool (pinned and device pages, re-rotated per layer, each
#     schedule) against the same prefill with the units' KV in place, and the runner's full
#     recompute against the plain prefill;
#  2. TTFT per method, qwen2.5-14b shape (random weights) bf16, KV waiting in pinned host memory,
#     10/20/30/40 segments (bench keep; methods and ablations in app/cli/cmd_bench_keep.cpp),
#     with the loader's copy throughput beside one contiguous pinned->device copy;
#  3. the Hugging Face transformers peer: full prefill of the same prompt lengths (bf16, SDPA).
#   ENGRAM_COMMIT=<sha> OUT=<dir> [SEGMENTS=10,20,30,40] [REPEAT=5] [KEEP_OPTIONS=probe=8] [SKIP_HF=1] bash bench/run_device_keep.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
R=$OUT/keep
mkdir -p "$R"
SEGMENTS=${SEGMENTS:-10,20,30,40}
REPEAT=${REPEAT:-5}
KEEP_OPTIONS=${KEEP_OPTIONS-probe=8}  # every keep method's options (the authors' code probes 3 rows)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/device.txt"
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> "$R/device.txt"
TOP=$OUT
finish() { tar -C "$TOP" -czf "$TOP/keep.tar.gz" keep && rm -rf "$R"; }
trap finish EXIT
OUT=$R source bench/device_build.sh
OUT=$TOP
for m in llama-gqa qwen2-bias-tied qwen3-qknorm; do
  timeout 120 $CLI bench keep --model tests/data/models/$m --device cuda --dtype f32 --segments 6,12 \
    --segment-tokens-min 5 --segment-tokens-max 12 --prefix-tokens 4 --query-tokens 4 \
    --chunk-tokens 16 --changed 2 --page-tokens 4 --repeat 1 --check --json "$R/check-$m.json" > "$R/check-$m.log" 2>&1
  echo "check $m rc=$?"
done
python3 - "$R" <<'PY'
import json, glob, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "check-*.json"))):
    j = json.load(open(f))
    for row in j["rows"]:
        for name, m in row["methods"].items():
            c = {k: v for k, v in m.items() if k.startswith("check")}
            if c: print(os.path.basename(f), row["segments"], name, c)
PY
timeout 420 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments $SEGMENTS \
  --repeat $REPEAT --check --keep-options "$KEEP_OPTIONS" \
  --methods full-recompute,prefix-cache,full-reuse,cacheblend,keep,keep-all-rows,keep-naive,keep-serial,keep-one-hop,keep-blocks \
  --json "$R/ttft-qwen2.5-14b.json" 2>&1 | tee "$R/ttft.log" | grep -v "^{"
echo "bench keep rc=${PIPESTATUS[0]}"
python3 - "$R/ttft-qwen2.5-14b.json" > "$R/prompt_tokens.txt" <<'PY'
import json, sys
print(" ".join(str(r["prompt_tokens"]) for r in json.load(open(sys.argv[1]))["rows"]))
PY
[ -n "${SKIP_HF:-}" ] && exit 0
for t in $(cat "$R/prompt_tokens.txt"); do
  timeout 120 python3 bench/peers/hf_bench.py --shape qwen2.5-14b --tokens $t --decode-tokens 1 \
    --repeat $REPEAT --json "$R/hf-qwen2.5-14b-$t.json" 2>&1 | grep -v Warning | tail -1
done
