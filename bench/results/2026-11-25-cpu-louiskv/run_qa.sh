#!/usr/bin/env bash
# QA exact match on held-out conversations (engram-tiny, CPU): the history is prefilled with full
# attention, then each question is fed token by token through decode-time retrieval (prompt=1,
# Quest's long-input method) and the answer decoded the same way. S=32, W=512 (holds the question
# and answer), tau=0.85 (the paper's long-input setting), budgets 256 and 512 of ~3,000 tokens.
set -euo pipefail
CLI=${CLI:-build/app/cli/engram-cli}
D=$(dirname "$0")
E=${EPISODES:-10}
export OMP_NUM_THREADS=1
run() { $CLI eval conversation --model resources/models/engram-tiny --episodes $E --policy "$2" --json "$D/qa-$1.json" > "$D/qa-$1.txt" 2>&1; }
run full full
for b in 256 512; do
  run louiskv-$b "louiskv:prompt=1,tau=85,sinks=32,window=512,budget=$b"
  run pageretrieval-$b "pageretrieval:prompt=1,sinks=32,window=512,budget=$b"
  run louiskv-stride5-$b "louiskv:prompt=1,stride=5,sinks=32,window=512,budget=$b"
done
# Retrieval frequency beside accuracy (eval conversation reports retrievals per token from 5172e14
# on): adaptive at two thresholds against the fixed stride above.
for t in 85 50; do
  run louiskv-tau$t-256 "louiskv:prompt=1,tau=$t,sinks=32,window=512,budget=256"
done
# Composition: retrieval over what a prefill policy kept (snapkv at 1024; epicache episodes at 512,
# the epicache run needs d04e84a or later).
$CLI eval conversation --model resources/models/engram-tiny --episodes $E --policy snapkv --kv-budget 1024 --json "$D/qa-snapkv-1024.json" > "$D/qa-snapkv-1024.txt" 2>&1
$CLI eval conversation --model resources/models/engram-tiny --episodes $E --policy "snapkv+louiskv:prompt=1,tau=85,sinks=32,window=512,budget=256" --kv-budget 1024 --json "$D/qa-snapkv-1024+louiskv-256.json" > "$D/qa-snapkv-1024+louiskv-256.txt" 2>&1
$CLI eval conversation --model resources/models/engram-tiny --episodes $E --policy epicache --kv-budget 512 --json "$D/qa-epicache-512.json" > "$D/qa-epicache-512.txt" 2>&1
$CLI eval conversation --model resources/models/engram-tiny --episodes $E --policy "epicache+louiskv:prompt=1,tau=85,sinks=32,window=512,budget=256" --kv-budget 512 --json "$D/qa-epicache-512+louiskv-256.json" > "$D/qa-epicache-512+louiskv-256.txt" 2>&1
# Dropping baselines at louiskv B=256's attention size (sinks 32 + 256 + window 512 = 800).
for p in h2o streaming; do
  $CLI eval conversation --model resources/models/engram-tiny --episodes $E --policy $p --kv-budget 800 --json "$D/qa-$p-800.json" > "$D/qa-$p-800.txt" 2>&1
done
