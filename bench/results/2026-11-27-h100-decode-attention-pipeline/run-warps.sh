#!/usr/bin/env bash
# Call 3: the warp-independent partial kernel (the default in this build) against the block-wide
# tile of 336d648 (ENGRAM_DECODE_BLOCK_TILES=1, a temporary peer in the same build): every GPU
# check, the speed rows both ways, then decode ms/token both ways.
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
ENGRAM_DECODE_BLOCK_TILES=1 $B/bench/engram-gpu-checks --only decode_attention --json $OUT/gpu_checks_block.json > $OUT/gpu_checks_block.log 2>&1
echo "block tiles: rc=$? PASS $(grep -c PASS $OUT/gpu_checks_block.log) FAIL $(grep -c FAIL $OUT/gpu_checks_block.log)"
grep -E "3B shape" $OUT/gpu_checks_block.log
run() {  # name shape tokens modes...
  local name=$1 shape=$2 tokens=$3; shift 3
  for mode in "$@"; do
    unset ENGRAM_DECODE_BLOCK_TILES
    [ $mode = block ] && export ENGRAM_DECODE_BLOCK_TILES=1
    timeout 150 $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens $tokens --decode-tokens 256 --repeat 3 \
      --policy full --json $OUT/decode-$name-$mode.json > $OUT/decode-$name-$mode.log 2>&1
    echo "$name $mode rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token, %.0f%% of roofline' % (d['per_token_latency_ms'], 100*d.get('fraction_of_roofline',0)))" $OUT/decode-$name-$mode.json 2>/dev/null) at ${SECONDS}s"
  done
  unset ENGRAM_DECODE_BLOCK_TILES
}
run 3b-10k llama3.2-3b 10240 warps block warps block
run 3b-90k llama3.2-3b 90000 warps block
run 8b-32k llama3.1-8b 32768 warps block warps
grep -h -i -E "error|what\(\)" $OUT/decode-*.log | sort | uniq -c | head
rm -f $OUT/build.log
cd $OUT && tar czf all.tgz *.json *.log device.txt && rm -f *.json *.log
