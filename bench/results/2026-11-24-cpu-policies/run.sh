#!/usr/bin/env bash
# QA accuracy of engram-tiny per memory policy and KV budget on the held-out conversations
# (issue 14): full KV vs streaming vs snapkv at 512/1024/2048 tokens per layer, two seed sets.
# Run from the repository root after building: bash bench/results/2026-11-24-cpu-policies/run.sh
set -euo pipefail
out=bench/results/2026-11-24-cpu-policies
cli=build/app/cli/engram-cli
model=resources/models/engram-tiny
for seed in 1000000 1000020; do
  "$cli" eval conversation --model "$model" --episodes 20 --seed "$seed" --policy full \
    --json "$out/full-seed$seed.json" > "$out/full-seed$seed.txt" 2>&1
  for policy in streaming snapkv; do
    for budget in 512 1024 2048; do
      "$cli" eval conversation --model "$model" --episodes 20 --seed "$seed" --policy "$policy" \
        --kv-budget "$budget" --json "$out/$policy-$budget-seed$seed.json" \
        > "$out/$policy-$budget-seed$seed.txt" 2>&1
    done
  done
done
