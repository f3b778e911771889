#!/usr/bin/env bash
# Call 2: the slow runs' host time, layer by layer, with the thread's time on a CPU and the
# machine's stolen time per run; the changed units' forward beside the prefill (default) and
# before it (--invalidation serial). Same warm machine as call 1 (incremental build).
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-27-h100-keep-host-contention/run2.sh
set -uo pipefail
SECONDS=0
mkdir -p $OUT/b && (OUT=$OUT/b; source bench/device_build.sh) | tail -1; rm -rf $OUT/b
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
echo "commit ${ENGRAM_COMMIT:-} date $(date -u +%F)" >> $OUT/device.txt
echo "built at ${SECONDS}s"
run() {  # name, extra flags, then the command's prefix
  local name=$1 extra=$2; shift 2
  "$@" timeout 150 $CLI bench keep --shape qwen2.5-14b --device cuda --dtype bf16 --segments 40 \
    --repeat ${REPEAT:-15} --keep-options probe=8 --methods full-recompute,keep,keep-naive $extra \
    --json $OUT/ttft-$name.json > /dev/null 2>&1
  echo "== $name rc=$? at ${SECONDS}s load $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - $OUT/ttft-$name.json <<'PY'
import json, sys, statistics
j = json.load(open(sys.argv[1]))
for r in j["rows"]:
    for name in ("keep", "keep-naive"):
        m = r["methods"][name]
        print("  %-10s med %.1f (full %.1f)" % (name, m["ttft_ms"], r["methods"]["full-recompute"]["ttft_ms"]))
        runs = list(zip(m["ttft_runs_ms"], m["host_enqueue_runs_ms"], m["host_wait_runs_ms"],
                        m["thread_on_cpu_runs_ms"], m["thread_queued_runs_ms"], m["steal_ticks_runs"]))
        for t, e, w, c, q, s in runs:
            print("    ttft %6.1f enqueue %5.1f wait %5.1f on-cpu %6.1f queued %5.1f steal %3d" % (t, e, w, c, q, s))
        L = m["host_enqueue_layer_runs_ms"]
        slow = max(range(len(runs)), key=lambda i: runs[i][0])
        med = sorted(range(len(runs)), key=lambda i: runs[i][0])[len(runs) // 2]
        d = [(L[slow][l] - L[med][l], l) for l in range(len(L[slow]))]
        d.sort(reverse=True)
        print("    slowest run %.1f vs median %.1f: enqueue per layer, largest differences (ms, layer):" % (runs[slow][0], runs[med][0]),
              ", ".join("%.2f@%d" % x for x in d[:8]), "; median layer %.2f vs %.2f" % (
                  statistics.median(L[slow]), statistics.median(L[med])))
PY
}
run pinned2 "" env taskset -c 10,11
run pinned2-serial "--invalidation serial" env taskset -c 10,11
run all-cores "" env
rm -f $OUT/build.log
