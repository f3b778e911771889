#!/usr/bin/env python3
"""Sums a Kineto (PyTorch profiler) Chrome trace by name: GPU kernels and copies (device time)
and host ATen ops (host time), the largest first. For traces from `engram-cli bench keep
--profile`.

    python3 bench/profile_summary.py TRACE.json [--top 25] [--gaps MS]

--gaps MS: then the device's idle time: every stretch of at least MS milliseconds with no kernel,
copy or memset running, and the host ATen ops and CUDA runtime calls that overlap those stretches
(summed by name over every nesting level): what the GPU waited for.
"""
import argparse
import bisect
import collections
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--gaps", type=float, default=0.0)
    a = ap.parse_args()
    events = json.load(open(a.trace)).get("traceEvents", [])
    summarize(events, a.top)
    if a.gaps > 0:
        idle_gaps(events, a.gaps, a.top)


def idle_gaps(events, min_ms, top):
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e)
    if not device:
        return
    gaps, end = [], device[0][1]
    for lo, hi in device[1:]:
        if lo - end >= min_ms * 1e3:
            gaps.append((end, lo))
        end = max(end, hi)
    total = sum(hi - lo for lo, hi in gaps)
    span = end - device[0][0]
    print(f"== device idle in stretches >= {min_ms} ms: {total / 1e3:.2f} ms in {len(gaps)} "
          f"stretches, of a {span / 1e3:.2f} ms span")
    ends = [hi for _, hi in gaps]
    for cat in ("cpu_op", "cuda_runtime", "user_annotation"):
        overlap, calls = collections.Counter(), collections.Counter()
        for e in events:
            if e.get("cat") != cat or "dur" not in e:
                continue
            h_lo, h_hi = e["ts"], e["ts"] + e["dur"]
            g = bisect.bisect_right(ends, h_lo)  # the first stretch ending after the call starts
            while g < len(gaps) and gaps[g][0] < h_hi:
                o = min(h_hi, gaps[g][1]) - max(h_lo, gaps[g][0])
                if o > 0:
                    name = e.get("name", "?")[:110]
                    overlap[name] += o
                    calls[name] += 1
                g += 1
        if cat == "cpu_op":
            print(f"-- idle with no ATen op running on any host thread: "
                  f"{(total - covered(events, gaps, cat)) / 1e3:.2f} ms (host code between ops)")
        if overlap:
            print(f"-- {cat} overlapping the idle stretches")
            for name, us in overlap.most_common(top):
                print(f"{us / 1e3:9.3f} ms {calls[name]:6d}x  {name}")


def covered(events, gaps, cat):
    """Microseconds of the gaps during which some `cat` event runs."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == cat and "dur" in e)
    merged = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    starts = [lo for lo, _ in merged]
    out = 0
    for g_lo, g_hi in gaps:
        i = max(0, bisect.bisect_right(starts, g_lo) - 1)
        while i < len(merged) and merged[i][0] < g_hi:
            out += max(0, min(g_hi, merged[i][1]) - max(g_lo, merged[i][0]))
            i += 1
    return out


def summarize(events, top):
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
        for name, us in c.most_common(top):
            print(f"{us / 1e3:9.3f} ms {counts[cat][name]:6d}x  {name}")


if __name__ == "__main__":
    main()
