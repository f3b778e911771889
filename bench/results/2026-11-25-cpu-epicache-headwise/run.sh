#!/usr/bin/env bash
# EpiCache's head-wise non-uniform selection (issue 15, per_head=2) against per-head uniform
# selection (per_head=1) on engram-tiny, CPU f32, the held-out conversations of
# ../2026-11-24-cpu-epicache (same model, first seed and flags; fewer conversations:
# CONVERSATIONS, default 5). Run from the repository root after building engram-cli:
#   bash bench/results/2026-11-25-cpu-epicache-headwise/run.sh [SEED]   (default 1000000)
#
# A pair budget M (layers=M for each of the 10 layers: M·H_kv (head, token) pairs per layer after
# each shrink) in a working set of 2M slots (--kv-budget 2M): per_head=2 lets a head keep up to
# 2M tokens, per_head=1 keeps M in every head. Same policy, runner, allocation and patch; only
# the selection differs.
set -euo pipefail
out=bench/results/2026-11-25-cpu-epicache-headwise
cli=build/app/cli/engram-cli
model=resources/models/engram-tiny
seed=${1:-1000000}
n=${CONVERSATIONS:-5}
export OMP_NUM_THREADS=1
every() { for _ in 1 2 3 4 5 6 7 8 9 10; do printf "%s," "$1"; done | sed "s/,$//"; }
run() {  # name policy budget
  "$cli" eval conversation --model "$model" --episodes "$n" --seed "$seed" --policy "$2" \
    --kv-budget "$3" --json "$out/$1-$3-seed$seed.json" > "$out/$1-$3-seed$seed.txt" 2>&1
}
for m in 512 256; do
  run "epicache-joint$m" "epicache:per_head=2,layers=$(every $m)" $((2 * m)) &
  run "epicache-uniform$m" "epicache:layers=$(every $m)" $((2 * m)) &
  wait
done
# Today's default beside them: M = the slot budget.
run epicache epicache 512 &
run epicache epicache 1024 &
wait
