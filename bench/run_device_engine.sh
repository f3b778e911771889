#!/usr/bin/env bash
# Issue 14 on the GPU machine after the one-layer change and the paged pool, in one call:
#  1. the GPU checks (engram-gpu-checks: kernels, the paged pool's bf16 round trip and loaded
#     units against resident KV on CUDA);
#  2. bf16 logits against transformers on every fixture (the layer now runs through
#     core/runtime/decoder_layer.cpp on both paths);
#  3. greedy tokens of the recorded CUDA-graph step against the per-layer path (generate
#     --trace), f32 and bf16, full KV and streaming with budget 32 (a plan every few tokens);
#  4. decode speed, qwen2.5-7b and llama3-8b shapes: full KV vs streaming whose budget holds
#     everything (the fast path with an unchanged working set);
#  5. bench pages: units from the pinned pool, per-layer copies overlapping compute vs serial vs
#     resident, beside one contiguous pinned->device copy (the PCIe limit).
# Everything lands in $OUT/engine.tar.gz (the device returns few files).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/run_device_engine.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
R=$OUT/engine
mkdir -p "$R"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/device.txt"
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> "$R/device.txt"
TOP=$OUT
finish() { tar -C "$TOP" -czf "$TOP/engine.tar.gz" engine && rm -rf "$R"; }
trap finish EXIT
OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh
OUT=$TOP
$B/bench/engram-gpu-checks --json "$R/gpu_checks.json" > "$R/gpu_checks.log" 2>&1
echo "gpu checks rc=$?"; grep -iE "fail|paged|error" "$R/gpu_checks.log" | head -20
python3 bench/peers/hf_bf16_compare.py --cli $CLI --data tests/data --json "$R/bf16_vs_transformers.json" 2>&1 | grep -v Warning | tail -8
for dtype in f32 bf16; do
  for policy in "full" "streaming --kv-budget 32"; do
    for m in llama-gqa qwen2-bias-tied qwen3-qknorm llama3-rope-scaling mistral; do
      flags="--model tests/data/models/$m --ids 1000,5,6,7,8,9,10,11 --max-tokens 96 --ignore-eos --device cuda --dtype $dtype --policy $policy"
      g=$($CLI generate $flags 2>>"$R/generate.err")
      t=$($CLI generate $flags --trace /tmp/t.jsonl 2>>"$R/generate.err")
      python3 -c "import sys; a,b=sys.argv[3].split(','),sys.argv[4].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))); print(f'{sys.argv[1]} {sys.argv[2]} [{sys.argv[5]}]: graph {len(a)} vs per-layer {len(b)} tokens, identical prefix {n}')" $dtype $m "$g" "$t" "$policy"
    done
  done
done 2>&1 | tee "$R/graph_vs_per_layer.txt" | grep -v "identical prefix 96$" ; tail -3 "$R/generate.err"
for shape in qwen2.5-7b llama3-8b; do
  $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --policy full --json "$R/decode-$shape-full.json" 2>&1 | tail -1
  $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --chunk 512 --policy streaming --kv-budget 4608 --json "$R/decode-$shape-streaming-4608.json" 2>&1 | tail -1
done 2>&1 | tee "$R/decode.txt"
for shape in qwen2.5-7b llama3-8b; do
  for units in 8 24; do
    for fresh in 16 512; do
      $CLI bench pages --shape $shape --device cuda --dtype bf16 --units $units --unit-tokens 256 --page-tokens 64 --fresh $fresh --repeat 7 --json "$R/pages-$shape-$units-$fresh.json" 2>&1 | tail -1
    done
  done
done 2>&1 | tee "$R/pages.txt"
python3 - "$R" <<'PY'
import json, glob, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "decode-*.json"))):
    j = json.load(open(f))
    rows[os.path.basename(f)] = {k: j.get(k) for k in ("policy", "kv_budget", "peak_kv_tokens", "tokens_per_s", "tokens_per_s_runs", "roofline_tokens_per_s")}
json.dump(rows, open(os.path.join(sys.argv[1], "decode_summary.json"), "w"), indent=1)
for k, v in rows.items(): print(k, v["tokens_per_s"])
PY
