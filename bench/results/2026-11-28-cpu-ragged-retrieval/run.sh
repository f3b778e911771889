#!/usr/bin/env bash
# QA over long history on engram-tiny (CPU f32), EpiCache's head-wise selection (per_head=2, a
# pair budget M = 512 per layer in 1,024 slots: ragged lists) alone and with decode-time
# retrieval over its ragged episode caches (louiskv B=256, the settings of
# ../2026-11-25-cpu-louiskv's epicache+louiskv run), the held-out conversations of
# ../2026-11-25-cpu-epicache-headwise (first seed 1000000, 5 conversations, 75 questions).
# Run from the repository root after building engram-cli:
#   bash bench/results/2026-11-28-cpu-ragged-retrieval/run.sh
set -euo pipefail
out=bench/results/2026-11-28-cpu-ragged-retrieval
cli=build/app/cli/engram-cli
every() { for _ in 1 2 3 4 5 6 7 8 9 10; do printf "%s," "$1"; done | sed "s/,$//"; }
export OMP_NUM_THREADS=1
run() {  # name policy
  "$cli" eval conversation --model resources/models/engram-tiny --episodes 5 --seed 1000000 \
    --policy "$2" --kv-budget 1024 --json "$out/$1.json" > "$out/$1.txt" 2>&1
}
joint="epicache:per_head=2,layers=$(every 512)"
run epicache-joint512 "$joint" &
run epicache-joint512+louiskv-256 "$joint+louiskv:tau=85,sinks=32,window=512,budget=256,prompt=1" &
wait
