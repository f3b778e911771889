#!/usr/bin/env bash
# Ragged plans on the GPU machine, in one call: builds engram-cli against its PyTorch (the torch
# 2.x SDPA branch of attention() with key_valid is compiled only there), then
#  1. greedy tokens of the recorded CUDA-graph decode against the per-layer path (--trace) under
#     epicache:per_head=2 with layer budgets (a ragged plan at decode shrinks: the graph is
#     re-recorded when the validity mask appears), f32 and bf16, on the GQA fixtures;
#  2. eval conversation on engram-tiny, CUDA f32, the rows of run.sh's first pair (5
#     conversations): prefill blocks after ragged plans go through SDPA with a per-head mask.
#   OUT=<dir> bash bench/results/2026-11-25-cpu-epicache-headwise/device_ragged.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt"
source bench/device_build.sh
ids=$(python3 -c "print(','.join(str(3+(i*7919)%900) for i in range(300)))")
spec="epicache:per_head=2,layers=40,24,window=8,tail=4"
for dtype in f32 bf16; do
  for m in llama-gqa qwen3-qknorm llama3-rope-scaling mistral; do
    flags="--model tests/data/models/$m --ids $ids --max-tokens 96 --ignore-eos --device cuda --dtype $dtype --policy $spec --kv-budget 48"
    g=$($CLI generate $flags 2>>"$OUT/generate.err")
    t=$($CLI generate $flags --trace /tmp/t.jsonl 2>>"$OUT/generate.err")
    c=$($CLI generate ${flags/--device cuda --dtype $dtype/--device cpu --dtype f32} 2>>"$OUT/generate.err")
    python3 -c "import sys; p=lambda s: s.split(','); a,b,c=p(sys.argv[3]),p(sys.argv[4]),p(sys.argv[5]); f=lambda a,b: next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))); print(f'{sys.argv[1]} {sys.argv[2]}: graph {len(a)} vs per-layer {len(b)} tokens, identical prefix {f(a,b)}; vs CPU f32 identical prefix {f(a,c)}')" $dtype $m "$g" "$t" "$c"
  done
done 2>&1 | tee "$OUT/graph_vs_per_layer_ragged.txt"; tail -3 "$OUT/generate.err"
every() { for _ in 1 2 3 4 5 6 7 8 9 10; do printf "%s," "$1"; done | sed "s/,$//"; }
for row in "joint512 epicache:per_head=2,layers=$(every 512)" "uniform512 epicache:layers=$(every 512)"; do
  set -- $row
  timeout 240 $CLI eval conversation --model resources/models/engram-tiny --episodes 5 --seed 1000000 \
    --policy "$2" --kv-budget 1024 --device cuda --json "$OUT/cuda-$1-1024.json" > "$OUT/cuda-$1-1024.txt" 2>&1
  echo "$1 rc=$?"; tail -4 "$OUT/cuda-$1-1024.txt"
done
