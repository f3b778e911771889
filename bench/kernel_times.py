#!/usr/bin/env python3
"""Each GPU kernel's device time in the decode steps of a Kineto trace (`engram-cli bench decode
--profile TRACE`): the kernels from the first one whose name contains --first (default
decode_linear: the prefill before has none) to the end, cut into steps where the device idles
longer than --step-gap-us (the host's sampling between tokens). Per kernel name: launches, mean
and total device time; per step: span, busy time, the time between kernels and how much kernels
overlap (dependent launches start before the kernel they follow ends).

    python3 bench/kernel_times.py TRACE.json [--first decode_linear] [--step-gap-us 15]
"""
import argparse
import collections
import json
import statistics


def short(name):
    for cut in ("void ", "engram::gpu::", "(anonymous namespace)::"):
        name = name.replace(cut, "")
    return name.split("(")[0][:90]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--first", default="decode_linear")
    ap.add_argument("--step-gap-us", type=float, default=15.0)
    a = ap.parse_args()
    events = json.load(open(a.trace)).get("traceEvents", [])
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and "dur" in e),
                     key=lambda e: e["ts"])
    start = next((i for i, e in enumerate(kernels) if a.first in e["name"]), None)
    if start is None:
        raise SystemExit(f"no kernel named *{a.first}* among {len(kernels)}")
    kernels = kernels[start:]
    steps, cur = [], [kernels[0]]
    for prev, k in zip(kernels, kernels[1:]):
        if k["ts"] - (prev["ts"] + prev["dur"]) > a.step_gap_us:
            steps.append(cur)
            cur = []
        cur.append(k)
    steps.append(cur)
    # The first and last steps may be cut by the window: keep the steps of the common length.
    common = statistics.mode(len(s) for s in steps)
    full = [s for s in steps if len(s) == common]
    print(f"{len(kernels)} kernels, {len(steps)} steps, {len(full)} of {common} kernels kept")
    spans, busy, gaps, overlap = [], [], [], []
    for s in full:
        spans.append(s[-1]["ts"] + s[-1]["dur"] - s[0]["ts"])
        busy.append(sum(k["dur"] for k in s))
        g = o = 0.0
        for prev, k in zip(s, s[1:]):
            d = k["ts"] - (prev["ts"] + prev["dur"])
            if d > 0:
                g += d
            else:
                o -= d
        gaps.append(g)
        overlap.append(o)
    med = statistics.median
    print(f"per step (median): span {med(spans):.1f} us, kernel time {med(busy):.1f} us, "
          f"between kernels {med(gaps):.1f} us, overlapped {med(overlap):.1f} us")
    by = collections.defaultdict(list)
    for s in full:
        for k in s:
            by[short(k["name"])].append(k["dur"])
    n = len(full)
    print(f"{'kernel':90s} {'per step':>8s} {'mean us':>8s} {'us/step':>8s}")
    for name, d in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name:90s} {len(d) / n:8.1f} {statistics.mean(d):8.2f} {sum(d) / n:8.1f}")
    # Each position in the step: its mean duration and the mean gap before it (the first layer's
    # and the last's; the middle layers repeat).
    print("position, kernel, mean us, mean gap before (us)")
    for i in range(common):
        d = statistics.mean(s[i]["dur"] for s in full)
        g = statistics.mean(s[i]["ts"] - (s[i - 1]["ts"] + s[i - 1]["dur"]) for s in full) if i else 0
        if i < 16 or i >= common - 6:
            print(f"{i:4d} {short(full[0][i]['name'])[:60]:60s} {d:8.2f} {g:8.2f}")


if __name__ == "__main__":
    main()
