#!/usr/bin/env bash
# Long-prompt prefill on the 3B shape: Engram at several chunk sizes vs transformers (SDPA), one
# profile of the 2048-chunk prefill; then LouisKV 500 in / 16K out (stride 16) for its device KV.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
S="--shape llama3.2-3b --device cuda --dtype bf16"
for c in 2048 8192 32768; do
  timeout 120 $CLI bench prefill $S --tokens 90000 --chunk $c --repeat 2 --json $OUT/prefill-90k-chunk$c.json > /tmp/p.out 2>&1
  echo "chunk $c rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.0f tokens/s = %.2f s' % (d['tokens_per_s'], 90000/d['tokens_per_s']))" $OUT/prefill-90k-chunk$c.json 2>/dev/null)"
done
timeout 120 $CLI bench prefill $S --tokens 90000 --chunk 2048 --repeat 1 --profile /tmp/pp > /dev/null 2>&1
python3 bench/profile_summary.py /tmp/pp --top 30 > $OUT/profile-prefill-90k-chunk2048.txt 2>&1
head -45 $OUT/profile-prefill-90k-chunk2048.txt
timeout 150 python3 bench/peers/hf_bench.py --shape llama3.2-3b --tokens 90000 --decode-tokens 2 --repeat 2 --json $OUT/hf-prefill-90k.json 2>&1 | grep -v Warning | tail -1
timeout 200 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --repeat 1 --tokens 500 --decode-tokens 16384 --warmup-decode-tokens 256 \
  --policy louiskv:stride=16,sinks=64,window=256,budget=1024 --json $OUT/in500-out16k-stride16.json > /tmp/l.out 2>&1
echo "louiskv 500/16K rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['per_token_latency_ms'], d['device_kv_bytes'], d['device_kv_fraction_of_full'])" $OUT/in500-out16k-stride16.json 2>/dev/null)"
rm -f $OUT/build.log $OUT/*.out
