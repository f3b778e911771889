#!/usr/bin/env bash
# Call 2: the ragged set with decode-time retrieval after the variable-length prefill (32K in /
# 512 out, louiskv:stride=16: time to first token includes its build), then Kineto profiles of the
# 32K prefill under the 8,192-slot budget, per_head=2 (ragged) and per head (uniform), each with
# the device's idle stretches of >= 0.2 ms and what the host ran meanwhile.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run2.sh
set -uo pipefail
source bench/device_session.sh
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
RAGGED="epicache:per_head=2,patch=2,layers=$LAYERS"
run_decode in32k-ragged-louiskv 32768 512 "$RAGGED+louiskv:stride=16" --kv-budget 8192
for what in ragged uniform; do
  spec=$RAGGED
  [ $what = uniform ] && spec="epicache:patch=2"
  timeout 120 $CLI bench prefill --shape llama3.1-8b --device cuda --dtype bf16 --tokens 32768 \
    --repeat 1 --policy "$spec" --kv-budget 8192 --json $R/prefill-$what.json \
    --profile /tmp/prof-$what.json > $R/prefill-$what.log 2>&1
  echo "prefill $what rc=$? $(grep -o '"tokens_per_s":[0-9.]*' $R/prefill-$what.json) at ${SECONDS}s"
  python3 bench/profile_summary.py /tmp/prof-$what.json --top 25 --gaps 0.2 > $R/profile-$what.txt 2>&1
  head -60 $R/profile-$what.txt
done
pack
