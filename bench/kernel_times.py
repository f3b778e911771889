#!/usr/bin/env python3
"""Where a decode step's device time goes, from a Kineto trace (`engram-cli bench decode --profile
TRACE`): the kernels from the first one whose name contains --first (default decode_linear: the
prefill before has none) to the end, cut into steps after each launch of the window's last kernel
(the sampler's, once a token). Kernels launched dependent start before the one they follow ends,
so a kernel's own duration overstates it; what it adds to the step is how much later the step's
latest end is once it has run ("adds"). Per kernel name and per position in the step (the first
layers, the last ones): launches, mean duration, mean time added.

    python3 bench/kernel_times.py TRACE.json [--first decode_linear]
"""
import argparse
import collections
import json
import statistics


def short(name):
    for cut in ("void ", "engram::gpu::", "(anonymous namespace)::", "at::native::"):
        name = name.replace(cut, "")
    return name.split("(")[0][:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--first", default="decode_linear")
    a = ap.parse_args()
    opener = open
    if a.trace.endswith(".gz"):
        import gzip
        opener = gzip.open
    events = json.load(opener(a.trace)).get("traceEvents", [])
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and "dur" in e),
                     key=lambda e: e["ts"])
    start = next((i for i, e in enumerate(kernels) if a.first in e["name"]), None)
    if start is None:
        raise SystemExit(f"no kernel named *{a.first}* among {len(kernels)}")
    kernels = kernels[start:]
    last = kernels[-1]["name"]
    steps, cur = [], []
    for k in kernels:
        cur.append(k)
        if k["name"] == last:
            steps.append(cur)
            cur = []
    # The window's first step starts mid-step: keep the steps of the common length.
    common = statistics.mode(len(s) for s in steps)
    full = [s for s in steps if len(s) == common]
    print(f"{len(kernels)} kernels, {len(steps)} steps, {len(full)} of {common} kernels kept")
    adds = [[0.0] * common for _ in full]
    spans, busy = [], []
    for n, s in enumerate(full):
        end = s[0]["ts"]
        for i, k in enumerate(s):
            k_end = k["ts"] + k["dur"]
            adds[n][i] = max(0.0, k_end - end)
            end = max(end, k_end)
        spans.append(end - s[0]["ts"])
        busy.append(sum(k["dur"] for k in s))
    med = statistics.median
    print(f"per step (median): span {med(spans):.1f} us, kernel durations summed {med(busy):.1f} us")
    by_dur, by_add = collections.defaultdict(list), collections.defaultdict(float)
    for n, s in enumerate(full):
        for i, k in enumerate(s):
            by_dur[short(k["name"])].append(k["dur"])
            by_add[short(k["name"])] += adds[n][i]
    m = len(full)
    print(f"{'kernel':70s} {'a step':>6s} {'mean us':>8s} {'adds us':>8s}")
    for name in sorted(by_add, key=lambda x: -by_add[x]):
        d = by_dur[name]
        print(f"{name:70s} {len(d) / m:6.1f} {statistics.mean(d):8.2f} {by_add[name] / m:8.1f}")
    print("position, kernel, mean us, adds us")
    for i in range(common):
        if i < 24 or i >= common - 6:
            d = statistics.mean(s[i]["dur"] for s in full)
            add = statistics.mean(adds[n][i] for n in range(m))
            print(f"{i:4d} {short(full[0][i]['name'])[:60]:60s} {d:8.2f} {add:8.2f}")


if __name__ == "__main__":
    main()
