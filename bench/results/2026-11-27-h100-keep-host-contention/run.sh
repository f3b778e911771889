#!/usr/bin/env bash
# Why some of KEEP's runs take ~135 ms instead of ~77 (issue 16): the same TTFT benchmark under
# different host conditions, in one call on one machine, with each run's host enqueue / wait and
# the main thread's voluntary / involuntary context switches (bench keep's *_runs fields).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-keep-host-contention/run.sh
set -uo pipefail
SECONDS=0
mkdir -p $OUT/b && (OUT=$OUT/b; source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
(nproc; lscpu -e=CPU,CORE,SOCKET,NODE; cat /proc/loadavg) > $OUT/host.txt 2>&1
echo "built at ${SECONDS}s"
run() {  # name, then the command's prefix
  local name=$1; shift
  "$@" timeout 150 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments 40 \
    --repeat ${REPEAT:-11} --keep-options probe=8 --methods full-recompute,keep,keep-naive \
    --json $OUT/ttft-$name.json > $OUT/ttft-$name.log 2>&1
  echo "== $name rc=$? at ${SECONDS}s load $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - $OUT/ttft-$name.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("  host", j.get("host"))
for r in j["rows"]:
    for name in ("keep", "keep-naive"):
        m = r["methods"][name]
        print("  %-10s med %.1f (full %.1f)" % (name, m["ttft_ms"], r["methods"]["full-recompute"]["ttft_ms"]))
        for t, e, w, v, i in zip(m["ttft_runs_ms"], m["host_enqueue_runs_ms"], m["host_wait_runs_ms"],
                                 m["voluntary_switches_runs"], m["involuntary_switches_runs"]):
            print("    ttft %6.1f enqueue %5.1f wait %5.1f switches vol %4d invol %4d" % (t, e, w, v, i))
PY
}
run pinned2 env taskset -c 10,11
run pinned2-omp1 env OMP_NUM_THREADS=1 taskset -c 10,11
run all-cores env
run pinned2-again env taskset -c 10,11
rm -f $OUT/build.log
