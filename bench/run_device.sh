#!/usr/bin/env bash
# Builds the engine against the GPU machine's PyTorch and runs every GPU measurement in one go:
# bf16 agreement with transformers, the GPU checks, the recorded decode step against the
# per-layer path (a traced generate keeps the per-layer path), prefill/decode speed of the
# qwen2.5-7b shape next to transformers. Results go to $OUT (see bench/README.md).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bench/run_device.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt"
DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh
$B/bench/engram-gpu-checks --json "$OUT/gpu_checks.json" > "$OUT/gpu_checks.log" 2>&1; echo "gpu checks rc=$?"; tail -30 "$OUT/gpu_checks.log"
python3 bench/peers/hf_bf16_compare.py --cli $CLI --data tests/data --json "$OUT/bf16_vs_transformers.json" 2>&1 | grep -v Warning | tail -8
$CLI bench prefill --shape qwen2.5-7b --device cuda --dtype bf16 --tokens 4096 --repeat 5 --json "$OUT/engram_prefill.json" 2>&1 | tail -2
# Greedy tokens of the recorded CUDA-graph step (plain generate) and of the per-layer path
# (generate --trace) on every fixture: bf16 rounding differs slightly, so a late divergence on a
# near-tie is possible; an early one is a bug.
for m in llama-gqa qwen2-bias-tied qwen3-qknorm llama3-rope-scaling mistral; do
  g=$($CLI generate --model tests/data/models/$m --ids 1000,5,6,7,8,9,10,11 --max-tokens 48 --ignore-eos --device cuda --dtype bf16 2>>"$OUT/generate.err")
  t=$($CLI generate --model tests/data/models/$m --ids 1000,5,6,7,8,9,10,11 --max-tokens 48 --ignore-eos --device cuda --dtype bf16 --trace /tmp/t.jsonl 2>>"$OUT/generate.err")
  python3 -c "import sys; a,b=sys.argv[2].split(','),sys.argv[3].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))); print(f'static-vs-per-layer {sys.argv[1]}: {len(a)} vs {len(b)} tokens, identical prefix {n}')" $m "$g" "$t"
done 2>&1 | tee "$OUT/static_vs_per_layer.txt"; tail -5 "$OUT/generate.err" 2>/dev/null
# No --trace here: a traced request keeps the per-layer path (core/engine/generator.cpp).
$CLI bench decode --shape qwen2.5-7b --device cuda --dtype bf16 --tokens 4096 --decode-tokens 256 --repeat 3 --json "$OUT/engram_decode.json" 2>&1 | tail -2
python3 bench/peers/hf_bench.py --shape qwen2.5-7b --tokens 4096 --decode-tokens 256 --repeat 3 --json "$OUT/transformers_qwen2.5-7b.json" 2>&1 | tail -2
