#!/usr/bin/env bash
# QA accuracy of engram-tiny under EpiCache (issue 15) on the held-out conversations, beside the
# baselines of ../2026-11-24-cpu-policies (same seeds and flags). Run from the repository root
# after building: bash bench/results/2026-11-24-cpu-epicache/run.sh [SEED ...] (default: both sets)
set -euo pipefail
out=bench/results/2026-11-24-cpu-epicache
cli=build/app/cli/engram-cli
model=resources/models/engram-tiny
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1000000 1000020)
run() {  # name policy budget seed
  "$cli" eval conversation --model "$model" --episodes 20 --seed "$4" --policy "$2" \
    --kv-budget "$3" --json "$out/$1-$3-seed$4.json" > "$out/$1-$3-seed$4.txt" 2>&1
}
for seed in "${seeds[@]}"; do
  for budget in 512 1024 2048; do run epicache epicache "$budget" "$seed"; done
done
# Variants, first seed set only.
for budget in 512 1024 2048; do run epicache-lexical epicache:embed=1 "$budget" 1000000; done
run epicache-patch1 epicache:patch=1 512 1000000
run epicache-patch2 epicache:patch=2 512 1000000
run epicache-e1 epicache:episodes=1 512 1000000
