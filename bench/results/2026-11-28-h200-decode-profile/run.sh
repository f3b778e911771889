#!/usr/bin/env bash
# Where a batch-1 decode step's time goes on the 3B shape (an EpiCache episode's ~10K slots
# against prefix caching's 90K): every GPU check, the decode attention's speed rows, the recorded
# step's ms/token, and, where the machine has Nsight Systems, each kernel's device time inside the
# CUDA graph (nsys --cuda-graph-trace=node).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h200-decode-profile/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
timeout 150 $B/bench/engram-gpu-checks --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|TIME decode_attention|TIME decode_linear one" $R/gpu_checks.log | head -30
gzip -f $R/gpu_checks.log $R/gpu_checks.json
for slots in 10240 90000; do
  timeout 120 $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens $slots \
    --decode-tokens 256 --repeat 3 --policy full --json $R/decode-3b-$slots.json > $R/decode-3b-$slots.log 2>&1
  echo "3b $slots rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token, %.0f%% of roofline' % (d['per_token_latency_ms'], 100*d.get('fraction_of_roofline',0)))" $R/decode-3b-$slots.json 2>/dev/null) at ${SECONDS}s"
done
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}; ncu: $(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)"
if [ -n "$NSYS" ]; then
  for slots in 10240 90000; do
    timeout 150 $NSYS profile --cuda-graph-trace=node -t cuda -o /tmp/prof-$slots -f true \
      $CLI bench decode --shape llama3.2-3b --device cuda --dtype bf16 --tokens $slots \
      --decode-tokens 128 --repeat 1 --policy full > $R/nsys-$slots.log 2>&1
    echo "nsys $slots rc=$?"
    $NSYS stats --report cuda_gpu_kern_sum --format csv -o $R/kern-$slots /tmp/prof-$slots.nsys-rep > /dev/null 2>&1
    $NSYS stats --report cuda_gpu_trace --format csv -o /tmp/trace-$slots /tmp/prof-$slots.nsys-rep > /dev/null 2>&1
    tail -n 3000 /tmp/trace-${slots}_cuda_gpu_trace.csv | gzip > $R/trace-tail-$slots.csv.gz
    head -25 $R/kern-${slots}_cuda_gpu_kern_sum.csv | cut -c1-220
  done
fi
pack
