#!/usr/bin/env bash
# QA accuracy of engram-tiny under EpiCache (issue 15) on the held-out conversations of
# bench/results/2026-11-24-cpu-policies (same seeds and flags; full, streaming and snapkv are
# that folder's runs): epicache at 512/1024/2048 tokens per layer, E = 4 episodes.
# Run from the repository root after building engram-cli in build-epi:
#   bash bench/results/2026-11-24-cpu-epicache/run.sh [SEED ...]
set -euo pipefail
out=bench/results/2026-11-24-cpu-epicache
cli=${CLI:-build-epi/app/cli/engram-cli}
model=resources/models/engram-tiny
export OMP_NUM_THREADS=1
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1000000 1000020)
for seed in "${seeds[@]}"; do
  for budget in 512 1024 2048; do
    "$cli" eval conversation --model "$model" --episodes 20 --seed "$seed" --policy epicache \
      --kv-budget "$budget" --json "$out/epicache-$budget-seed$seed.json" \
      > "$out/epicache-$budget-seed$seed.txt" 2>&1
  done
done
