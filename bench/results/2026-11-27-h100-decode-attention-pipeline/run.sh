#!/usr/bin/env bash
# The decode attention with its copies pipelined and a parallel combine, against the kernels of
# e9c5cfa in the same build (ENGRAM_PREVIOUS_DECODE_ATTENTION=1, a temporary peer): every GPU
# check, the kernel's speed rows (3B shape, 28 layers) both ways, then decode ms/token of the
# recorded step (--policy full) both ways, interleaved.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
cmake --build $B --target engram-gpu-checks -j16 > /tmp/gc.log 2>&1 || { grep -E "error" -A3 /tmp/gc.log | head -30; exit 1; }
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|hkv=8|3B shape" $OUT/gpu_checks.log | head -30
ENGRAM_PREVIOUS_DECODE_ATTENTION=1 $B/bench/engram-gpu-checks --only decode_attention --json $OUT/gpu_checks_previous.json > $OUT/gpu_checks_previous.log 2>&1
echo "previous kernels: rc=$? $(grep -E "3B shape" $OUT/gpu_checks_previous.log | sed 's/^/  /')"
$B/bench/engram-gpu-checks --only decode_attention --json $OUT/gpu_checks_again.json > $OUT/gpu_checks_again.log 2>&1
echo "new kernels again: rc=$? $(grep -E "3B shape" $OUT/gpu_checks_again.log | sed 's/^/  /')"
run() {  # name shape tokens
  local name=$1 shape=$2 tokens=$3
  for mode in new previous new previous; do
    unset ENGRAM_PREVIOUS_DECODE_ATTENTION
    [ $mode = previous ] && export ENGRAM_PREVIOUS_DECODE_ATTENTION=1
    timeout 150 $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens $tokens --decode-tokens 256 --repeat 3 \
      --policy full --json $OUT/decode-$name-$mode.json > $OUT/decode-$name-$mode.log 2>&1
    echo "$name $mode rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token, %.0f%% of roofline' % (d['per_token_latency_ms'], 100*d.get('fraction_of_roofline',0)))" $OUT/decode-$name-$mode.json 2>/dev/null) at ${SECONDS}s"
  done
  unset ENGRAM_PREVIOUS_DECODE_ATTENTION
}
run 3b-10k llama3.2-3b 10240
run 3b-90k llama3.2-3b 90000
run 8b-32k llama3.1-8b 32768
grep -h -i -E "error|what\(\)" $OUT/decode-*.log | sort | uniq -c | head
rm -f $OUT/build.log
