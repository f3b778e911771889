#!/usr/bin/env bash
# Issue 14 on the GPU machine, in one call: builds engram-cli against its PyTorch, then
#  1. the recorded CUDA-graph decode over a working set that a policy refills (streaming, budget
#     32: a plan every few tokens) against the per-layer path (generate --trace), f32 and bf16,
#     on every fixture: same greedy tokens;
#  2. decode speed of the qwen2.5-7b and llama3-8b shapes (bf16, 4,096-token prompt, 256 new
#     tokens) with full KV, with streaming whose budget holds everything (the working set never
#     changes: the policy's fast path), and with streaming at 2,048 (a plan every 16 tokens).
# Results go to $OUT.   ENGRAM_COMMIT=<sha> OUT=<dir> bench/run_device_policies.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt"
echo "commit ${ENGRAM_COMMIT:-unknown}" >> "$OUT/device.txt"
source bench/device_build.sh
for dtype in f32 bf16; do
  for m in llama-gqa qwen2-bias-tied qwen3-qknorm llama3-rope-scaling mistral; do
    flags="--model tests/data/models/$m --ids 1000,5,6,7,8,9,10,11 --max-tokens 96 --ignore-eos --device cuda --dtype $dtype --policy streaming --kv-budget 32"
    g=$($CLI generate $flags 2>>"$OUT/generate.err")
    t=$($CLI generate $flags --trace /tmp/t.jsonl 2>>"$OUT/generate.err")
    python3 -c "import sys; a,b=sys.argv[3].split(','),sys.argv[4].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))); print(f'{sys.argv[1]} {sys.argv[2]} streaming budget 32: graph {len(a)} vs per-layer {len(b)} tokens, identical prefix {n}')" $dtype $m "$g" "$t"
  done
done 2>&1 | tee "$OUT/graph_vs_per_layer_policy.txt"; tail -3 "$OUT/generate.err"
for shape in qwen2.5-7b llama3-8b; do
  $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --policy full --json "$OUT/decode-$shape-full.json" 2>&1 | tail -1
  $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --chunk 512 --policy streaming --kv-budget 4608 --json "$OUT/decode-$shape-streaming-4608.json" 2>&1 | tail -1
  $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --chunk 512 --policy streaming --kv-budget 2048 --json "$OUT/decode-$shape-streaming-2048.json" 2>&1 | tail -1
done 2>&1 | tee "$OUT/decode.txt"
python3 - "$OUT" <<'PY'
import json, glob, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "decode-*.json"))):
    j = json.load(open(f))
    rows[os.path.basename(f)] = {k: j.get(k) for k in ("policy", "kv_budget", "peak_kv_tokens", "tokens_per_s", "tokens_per_s_runs", "roofline_tokens_per_s", "device", "date", "commit")}
json.dump(rows, open(os.path.join(sys.argv[1], "summary.json"), "w"), indent=1)
print(json.dumps(rows, indent=1))
PY
