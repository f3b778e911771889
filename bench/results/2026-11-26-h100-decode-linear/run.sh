#!/usr/bin/env bash
# Decode GEMV: every GPU check, the decode_linear rows, then decode ms/token with the kernel and
# with cuBLAS (ENGRAM_CUBLAS_DECODE=1) in the same call: 3B at 10,240 and 90,000 slots, 8B at 4,096.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
cmake --build $B --target engram-gpu-checks -j16 > /tmp/gc.log 2>&1 || { grep -E "error" -A3 /tmp/gc.log | head -30; exit 1; }
$B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log)"
grep -E "FAIL|decode_linear" $OUT/gpu_checks.log | head -30
run() {  # name shape tokens
  for mode in kernel cublas; do
    if [ $mode = cublas ]; then export ENGRAM_CUBLAS_DECODE=1; else unset ENGRAM_CUBLAS_DECODE; fi
    timeout 150 $CLI bench decode --shape $2 --device cuda --dtype bf16 --tokens $3 --decode-tokens 256 --repeat 3 \
      --policy full --json $OUT/decode-$1-$mode.json > /dev/null 2>&1
    echo "$1 $mode rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token, %.0f%% of roofline' % (d['per_token_latency_ms'], 100*d.get('fraction_of_roofline',0)))" $OUT/decode-$1-$mode.json 2>/dev/null)"
  done
}
run 3b-10k llama3.2-3b 10240
run 3b-90k llama3.2-3b 90000
run 8b-4k llama3.1-8b 4096
unset ENGRAM_CUBLAS_DECODE
rm -f $OUT/build.log
