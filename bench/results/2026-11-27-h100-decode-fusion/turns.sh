#!/usr/bin/env bash
# Second call: the decode_linear checks again (all fused shapes), then EpiCache vs prefix caching,
# 300 turns over a 90K history on the llama3.2-3b shape (as 2026-11-26-h100-epicache-evict-when-full).
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1)
B=/tmp/engram-build
cmake --build $B --target engram-gpu-checks -j16 > /tmp/gc.log 2>&1 || { grep -E "error" -A3 /tmp/gc.log | head -30; exit 1; }
$B/bench/engram-gpu-checks --only decode_linear --json $OUT/gpu_checks_decode_linear.json > $OUT/gpu_checks_decode_linear.log 2>&1
echo "decode_linear checks rc=$? PASS $(grep -c PASS $OUT/gpu_checks_decode_linear.log) FAIL $(grep -c FAIL $OUT/gpu_checks_decode_linear.log) at ${SECONDS}s"
grep -E "FAIL|threw" $OUT/gpu_checks_decode_linear.log | head
SHAPE=llama3.2-3b METHODS="epicache:230 prefix:150" bash bench/run_device_epicache.sh turns
echo "done at ${SECONDS}s"
rm -f $OUT/build.log
