#!/usr/bin/env bash
# Decode step folds and dependent launches: every GPU check, then decode ms/token for
#   fused-pdl  (the default: norm/SiLU/residual folded into the GEMV, launches overlap)
#   fused      ENGRAM_NO_PDL=1
#   unfused    ENGRAM_NO_PDL=1 ENGRAM_UNFUSED_DECODE=1 (the GEMV alone, as at 2d5b987)
#   cublas     ENGRAM_NO_PDL=1 ENGRAM_CUBLAS_DECODE=1 (at::linear and separate ops)
# in the same call: 3B at 10,240 and 90,000 slots, 8B at 4,096.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
cmake --build $B --target engram-gpu-checks -j16 > /tmp/gc.log 2>&1 || { grep -E "error" -A3 /tmp/gc.log | head -30; exit 1; }
echo "built at ${SECONDS}s"
$B/bench/engram-gpu-checks --json $OUT/gpu_checks.json > $OUT/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks.log) FAIL $(grep -c FAIL $OUT/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|fused|TIME decode_linear one" $OUT/gpu_checks.log | head -30
run() {  # name shape tokens modes...
  local name=$1 shape=$2 tokens=$3; shift 3
  for mode in "$@"; do
    unset ENGRAM_NO_PDL ENGRAM_UNFUSED_DECODE ENGRAM_CUBLAS_DECODE
    case $mode in
      fused) export ENGRAM_NO_PDL=1 ;;
      unfused) export ENGRAM_NO_PDL=1 ENGRAM_UNFUSED_DECODE=1 ;;
      cublas) export ENGRAM_NO_PDL=1 ENGRAM_CUBLAS_DECODE=1 ;;
    esac
    timeout 150 $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens $tokens --decode-tokens 256 --repeat 3 \
      --policy full --json $OUT/decode-$name-$mode.json > $OUT/decode-$name-$mode.log 2>&1
    echo "$name $mode rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token, %.0f%% of roofline' % (d['per_token_latency_ms'], 100*d.get('fraction_of_roofline',0)))" $OUT/decode-$name-$mode.json 2>/dev/null) at ${SECONDS}s"
  done
  unset ENGRAM_NO_PDL ENGRAM_UNFUSED_DECODE ENGRAM_CUBLAS_DECODE
}
run 3b-10k llama3.2-3b 10240 fused-pdl fused unfused cublas
run 3b-90k llama3.2-3b 90000 fused-pdl fused unfused
run 8b-4k llama3.1-8b 4096 fused-pdl unfused
grep -h -i -E "error|what\(\)" $OUT/decode-*.log | sort | uniq -c | head
rm -f $OUT/build.log
