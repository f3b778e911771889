#!/usr/bin/env bash
# Issue 17 (LouisKV) on the GPU machine, in one call:
#  1. engram-gpu-checks: the LouisKV kernels (k-means assign/update, budgeted selection, row
#     gather from a pinned and a device pool) against their CPU reference bodies, with timings;
#  2. CUDA test rows: greedy tokens of full KV against louiskv and pageretrieval with a budget that
#     covers the pool, a retrieval at every step, a 4-token window that keeps offloading and no
#     full layers (must be identical in f32; bf16 reported), on every fixture;
#  3. per-token decode latency, llama3.1-8b shape (random weights) bf16: 32K in / 512 out for full
#     KV (recorded graph; per-layer with PHASES containing perlayerfull), louiskv (adaptive tau
#     0.7, and fixed stride 16) and pageretrieval at B=1024 in the recorded step (louiskv on the
#     per-layer path beside them with PHASES containing perlayer), retrievals per token and device KV bytes; then the long-output
#     case (500 in / LONG_OUT out) when time is left.
#   ENGRAM_COMMIT=<sha, written literally: the device copy's git HEAD is not this tree's> OUT=<dir> [LONG_OUT=2048] [PHASES="checks rows latency long"] bash bench/run_device_louiskv.sh
# (PHASES=quickchecks: only the recorded-retrieval and LouisKV decision checks of engram-gpu-checks;
#  besidecheck: the units-beside-the-prefill, offload and recorded-retrieval checks; REPEAT=N timed
#  runs per bench row, default 1)
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
R=$OUT/louiskv
mkdir -p "$R"
PHASES=${PHASES:-"checks rows latency"}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/device.txt"
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F)" >> "$R/device.txt"
TOP=$OUT
finish() { tar -C "$TOP" -czf "$TOP/louiskv.tar.gz" louiskv && rm -rf "$R"; }
trap finish EXIT
OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh
OUT=$TOP
if [[ " $PHASES " == *" checks "* ]]; then
  $B/bench/engram-gpu-checks --json "$R/gpu_checks.json" > "$R/gpu_checks.log" 2>&1
  echo "gpu checks rc=$?"; grep -E "FAIL|TIME" "$R/gpu_checks.log" | head -20
  grep -c "PASS louiskv" "$R/gpu_checks.log"
fi
if [[ $PHASES == *quickchecks* ]]; then
  # Only the recorded-retrieval comparison (three times) and the LouisKV decision kernel.
  $B/bench/engram-gpu-checks --only recorded_retrieval --json "$R/gpu_checks_recorded.json" > "$R/gpu_checks_recorded.log" 2>&1
  echo "recorded retrieval checks rc=$?"; grep -E "FAIL|TIME" "$R/gpu_checks_recorded.log" | head -20
  echo "PASS $(grep -c PASS "$R/gpu_checks_recorded.log")"
fi
if [[ $PHASES == *besidecheck* ]]; then
  # The prompt's units beside the prefill against after the first token, and the offload check.
  for c in units_beside_prefill offloaded_working_set recorded_retrieval; do
    $B/bench/engram-gpu-checks --only $c --json "$R/gpu_checks_$c.json" > "$R/gpu_checks_$c.log" 2>&1
    echo "$c rc=$?"; grep -E "PASS|FAIL" "$R/gpu_checks_$c.log" | cut -c1-400 | head -6
  done
fi
if [[ $PHASES == *rows* ]]; then
  cover="sinks=4,window=4,budget=4096,full_layers=0"
  for dtype in f32 bf16; do
    for m in llama-gqa qwen2-bias-tied qwen3-qknorm llama3-rope-scaling mistral; do
      flags="--model tests/data/models/$m --ids 1000,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --max-tokens 64 --ignore-eos --device cuda --dtype $dtype"
      f=$($CLI generate $flags --policy full 2>>"$R/generate.err")
      for p in "louiskv:stride=1,$cover" "pageretrieval:$cover,page=4"; do
        g=$($CLI generate $flags --policy "$p" 2>>"$R/generate.err")
        python3 -c "import sys; a,b=sys.argv[3].split(','),sys.argv[4].split(','); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), min(len(a),len(b))); print(f'{sys.argv[1]} {sys.argv[2]} [{sys.argv[5]}]: full {len(a)} vs retrieval {len(b)} tokens, identical prefix {n}')" $dtype $m "$f" "$g" "${p%%:*}"
      done
    done
  done 2>&1 | tee "$R/covering_vs_full.txt" | grep -v "identical prefix 64$"; tail -3 "$R/generate.err"
  echo "rows: $(grep -c 'identical prefix 64$' "$R/covering_vs_full.txt") of $(wc -l < "$R/covering_vs_full.txt") identical"
fi
bench() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout $t $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --repeat ${REPEAT:-1} "$@" \
    --json "$R/$name.json" > "$R/$name.log" 2>&1
  echo "$name rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['per_token_latency_ms']:.2f} ms/token ({d.get('per_token_latency_ms_without_build', float('nan')):.2f} without a build of {d.get('retrieval_build_ms', 0):.0f} ms), retrievals/token {d.get('retrievals_per_token','-')}, k-means rounds/layer {d.get('kmeans_rounds_per_layer','-')}, device KV {d['device_kv_bytes']/2**30:.2f} GiB, decode peak above the weights {d.get('decode_peak_above_weights_bytes', -2**30)/2**30:.2f} GiB (at its start {(d.get('decode_start_device_bytes', -2**30) - d.get('weight_bytes', 0))/2**30:.2f}); TTFT {d.get('time_to_first_token_ms', 0):.0f} ms, request {d.get('request_ms', 0):.0f} ms, layers clustered beside the prefill {d.get('units_beside_prefill_layers', '-')} (worker {d.get('beside_prefill_worker_ms', 0):.0f} ms, waited for {d.get('beside_prefill_wait_ms', 0):.0f} ms after it); restore of {d.get('restore_layers', 0)} layers {d.get('restore_ms', 0):.0f} ms ({d.get('restore_gbps', 0):.1f} GB/s)\")" "$R/$name.json" 2>/dev/null)"
}
if [[ $PHASES == *stridelatency* ]]; then
  # Only full KV and louiskv stride 16 at 32K in / 512 out (the fixed stride's lean recording).
  L="--tokens 32768 --decode-tokens 512"
  bench in32k-full-graph 150 $L --policy full
  bench in32k-louiskv-stride16-b1024 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024
  # The working set's retrieval layers kept on the device while the reply decodes (offload=0;
  # the default on CUDA since 2026-11-27 moves them to host memory).
  [[ $PHASES == *offload* ]] && bench in32k-louiskv-stride16-b1024-resident 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024,offload=0
  # The prompt's clustering and the offload's copies after the first token (overlap=0; the default
  # since 2026-11-27 makes them beside the prefill).
  [[ $PHASES == *overlap* ]] && bench in32k-louiskv-stride16-b1024-after 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024,overlap=0
  # Both orders with the working set resident (no copies to host memory beside the prefill).
  if [[ $PHASES == *overlapresident* ]]; then
    bench in32k-louiskv-stride16-b1024-resident 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024,offload=0
    bench in32k-louiskv-stride16-b1024-resident-after 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024,offload=0,overlap=0
  fi
  # k-means stopped once a round moves at most MOVED keys per thousand (default: none moves).
  if [[ $PHASES == *moved* ]]; then
    for m in ${MOVED:-10 50}; do
      bench in32k-louiskv-stride16-b1024-moved$m 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024,moved=$m
    done
  fi
elif [[ $PHASES == *latency* ]]; then
  L="--tokens 32768 --decode-tokens 512"
  # Retrieval policies decode in the recorded step (the decision on the device) unless --per-layer.
  bench in32k-full-graph 150 $L --policy full
  bench in32k-louiskv-b1024 150 $L --policy louiskv:tau=70,sinks=64,window=256,budget=1024
  bench in32k-louiskv-stride16-b1024 150 $L --policy louiskv:stride=16,sinks=64,window=256,budget=1024
  bench in32k-pageretrieval-b1024 150 $L --policy pageretrieval:sinks=64,window=256,budget=1024
  [[ $PHASES == *perlayer* ]] && bench in32k-louiskv-b1024-per-layer 150 $L --policy louiskv:tau=70,sinks=64,window=256,budget=1024 --per-layer
  [[ $PHASES == *perlayerfull* ]] && bench in32k-full-per-layer 150 $L --policy full --per-layer
fi
if [[ $PHASES == *out16k* ]]; then
  # The issue's long-output cases: 500 in / 16K out and 32K in / 16K out (OUT16K_POLICIES picks).
  for p in ${OUT16K_POLICIES:-full stride16 pageretrieval}; do
    case $p in
      full) spec=full ;;
      stride16) spec=louiskv:stride=16,sinks=64,window=256,budget=1024 ;;
      tau70) spec=louiskv:tau=70,sinks=64,window=256,budget=1024 ;;
      pageretrieval) spec=pageretrieval:sinks=64,window=256,budget=1024 ;;
      stride16resident) spec=louiskv:stride=16,sinks=64,window=256,budget=1024,offload=0 ;;
    esac
    for in in ${OUT16K_INPUTS:-500 32768}; do
      bench in$in-out16k-$p 420 --tokens $in --decode-tokens 16384 --warmup-decode-tokens 256 --policy $spec
    done
  done
fi
if [[ $PHASES == *long* ]]; then
  L="--tokens 500 --decode-tokens ${LONG_OUT:-2048}"
  bench out-full-graph 300 $L --policy full
  bench out-louiskv-b1024 300 $L --policy louiskv:tau=70,sinks=500,window=128,budget=1024
  bench out-pageretrieval-b1024 300 $L --policy pageretrieval:sinks=500,window=128,budget=1024
fi
