#!/usr/bin/env python3
"""Sums an `engram-cli bench ... --trace FILE` (the engine's device-clock intervals, JSON lines):
the compute lane's span, its busy time by interval kind and the device's idle gaps by what
follows each gap. Usage: trace_gaps.py TRACE.jsonl"""
import collections
import json
import sys

iv = [json.loads(l) for l in open(sys.argv[1]) if '"start_us"' in l]
iv = [i for i in iv if i.get("lane") == "compute"]
iv.sort(key=lambda i: i["start_us"])
span = iv[-1]["end_us"] - iv[0]["start_us"]
busy = collections.Counter()
gap_before = collections.Counter()
gaps = collections.Counter()
count = collections.Counter()
end = iv[0]["start_us"]
for i in iv:
    key = i["what"] if i["what"] != "layer" else ("layer 0" if i["layer"] == 0 else "layer")
    if i["start_us"] > end:
        gap_before[key] += i["start_us"] - end
        gaps[key] += 1
    busy[i["what"]] += i["end_us"] - i["start_us"]
    count[i["what"]] += 1
    end = max(end, i["end_us"])
print(f"span {span/1e3:.1f} ms, {len(iv)} intervals")
for k, v in busy.most_common():
    print(f"  busy {k}: {v/1e3:.1f} ms in {count[k]} ({v/1e3/count[k]:.2f} ms each)")
for k, v in gap_before.most_common():
    print(f"  idle before {k}: {v/1e3:.1f} ms in {gaps[k]} gaps")
