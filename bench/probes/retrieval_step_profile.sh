#!/usr/bin/env bash
# Where a recorded retrieval decode step spends its device time (issue 17): builds like
# bench/run_device_louiskv.sh, reruns the recorded-vs-per-layer check three times (a race would
# show as one run that differs), then, where nsys exists, profiles a short llama3.1-8b-shape
# decode (8K in, 128 out, bf16) for full KV and for louiskv at stride 16 and prints the kernel
# summaries.   OUT=<dir> bash bench/probes/retrieval_step_profile.sh
set -uo pipefail
OUT=${OUT:-/tmp/engram-out}
R=$OUT/profile
mkdir -p "$R"
OUT=$R DEVICE_TARGETS=engram-gpu-checks source bench/device_build.sh
$B/bench/engram-gpu-checks --only recorded_retrieval > "$R/recorded_retrieval.json" 2> "$R/recorded_retrieval.log"
echo "recorded retrieval check rc=$?"; grep -c PASS "$R/recorded_retrieval.log"; grep FAIL "$R/recorded_retrieval.log"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
for p in "full" "louiskv:stride=16,sinks=64,window=256,budget=1024"; do
  name=${p%%:*}
  args="bench decode --shape llama3.1-8b --device cuda --dtype bf16 --repeat 1 --tokens 8192 --decode-tokens 128 --policy $p"
  if [[ -n ${NSYS:-} ]]; then
    $NSYS profile -o "$R/$name" --force-overwrite true --cuda-graph-trace=node $CLI $args > "$R/$name.run.log" 2>&1
    $NSYS stats --report cuda_gpu_kern_sum --format csv "$R/$name.nsys-rep" > "$R/$name.kern.csv" 2>/dev/null
    rm -f "$R/$name.nsys-rep" "$R/$name.sqlite"
    echo "== $name: top kernels"; python3 - "$R/$name.kern.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
head, body = rows[0], rows[1:]
t, n, name = head.index('Total Time (ns)'), head.index('Instances'), head.index('Name')
total = sum(float(r[t]) for r in body)
print(f"total kernel time {total/1e6:.1f} ms")
for r in body[:25]:
    print(f"{float(r[t])/1e6:9.2f} ms {int(r[n]):8d}x  {r[name][:110]}")
PY
  else
    $CLI $args > "$R/$name.run.log" 2>&1
  fi
  tail -1 "$R/$name.run.log" | cut -c1-300
done
tar -C "$OUT" -czf "$OUT/profile.tar.gz" profile && rm -rf "$R"
