#!/usr/bin/env python3
"""Sums a Kineto (PyTorch profiler) Chrome trace by name: GPU kernels and copies (device time)
and host ATen ops (host time), the largest first. For traces from `engram-cli bench keep
--profile`.

    python3 bench/profile_summary.py TRACE.json [--top 25]
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    events = json.load(open(a.trace)).get("traceEvents", [])
    groups = {"kernel": collections.Counter(), "gpu_memcpy": collections.Counter(),
              "gpu_memset": collections.Counter(), "cpu_op": collections.Counter()}
    counts = {k: collections.Counter() for k in groups}
    span = {}
    for e in events:
        cat = e.get("cat", "")
        if cat not in groups or "dur" not in e:
            continue
        name = e.get("name", "?")[:110]
        groups[cat][name] += e["dur"]
        counts[cat][name] += 1
        lo, hi = span.get(cat, (float("inf"), 0))
        span[cat] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    for cat, c in groups.items():
        if not c:
            continue
        total = sum(c.values())
        lo, hi = span[cat]
        print(f"== {cat}: {total / 1e3:.2f} ms in {sum(counts[cat].values())} events, "
              f"span {(hi - lo) / 1e3:.2f} ms")
        for name, us in c.most_common(a.top):
            print(f"{us / 1e3:9.3f} ms {counts[cat][name]:6d}x  {name}")


if __name__ == "__main__":
    main()
