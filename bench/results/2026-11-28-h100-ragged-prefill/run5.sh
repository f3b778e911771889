#!/usr/bin/env bash
# Call 5: where the per-head (uniform) set's 32K prefill spends the ~1 s that full KV does not,
# unprofiled: `engram-cli bench prefill --trace` (the engine's own device-clock intervals: every
# layer of every block and patch, every plan's "evict") for the uniform set, the ragged set and
# full KV; per run the span, the layers' and the evictions' device time, and the device's idle
# gaps between them by what follows the gap.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-ragged-prefill/run5.sh
set -uo pipefail
source bench/device_session.sh
LAYERS=$(python3 -c "print(','.join(['6144']*32))")
for what in uniform ragged full; do
  spec="epicache:patch=2"; budget="--kv-budget 8192"
  [ $what = ragged ] && spec="epicache:per_head=2,patch=2,layers=$LAYERS"
  [ $what = full ] && { spec=full; budget=""; }
  timeout 120 $CLI bench prefill --shape llama3.1-8b --device cuda --dtype bf16 --tokens 32768 \
    --repeat 2 --policy "$spec" $budget --json $R/prefill-$what.json --trace $R/trace-$what.jsonl \
    > $R/prefill-$what.log 2>&1
  echo "prefill $what rc=$? $(grep -o '"tokens_per_s_runs":[^]]*]' $R/prefill-$what.json)"
  python3 - $R/trace-$what.jsonl <<'PY' | tee $R/gaps-$what.txt
import collections, json, sys
iv = [json.loads(l) for l in open(sys.argv[1]) if '"start_us"' in l]
iv = [i for i in iv if i.get("lane") == "compute"]
iv.sort(key=lambda i: i["start_us"])
span = iv[-1]["end_us"] - iv[0]["start_us"]
busy = collections.Counter(); gap_before = collections.Counter(); gaps = collections.Counter()
end = iv[0]["start_us"]
for i in iv:
    key = i["what"] if i["what"] != "layer" else ("layer 0" if i["layer"] == 0 else "layer")
    if i["start_us"] > end:
        gap_before[key] += i["start_us"] - end; gaps[key] += 1
    busy[i["what"]] += i["end_us"] - i["start_us"]
    end = max(end, i["end_us"])
print(f"span {span/1e3:.1f} ms, {len(iv)} intervals")
for k, v in busy.most_common(): print(f"  busy {k}: {v/1e3:.1f} ms")
for k, v in gap_before.most_common(): print(f"  idle before {k}: {v/1e3:.1f} ms in {gaps[k]} gaps")
PY
done
pack
