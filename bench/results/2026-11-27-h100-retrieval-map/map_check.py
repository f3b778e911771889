#!/usr/bin/env python3
"""Summarises and checks the retrieval map of a `--trace` file: retrievals per retrieval layer
and token, rows and units per retrieval, r_t; for an adaptive rule, a retrieval exactly at the
first step and where r_t < tau. Prints FAIL lines when the map breaks its own rules."""
import json
import math
import sys

maps = [json.loads(l)["retrieval_map"] for l in open(sys.argv[1]) if l.startswith('{"retrieval_map"')]
print(f"maps {len(maps)}")
for m in maps:
    L, S, F, H = m["layers"], m["steps"], m["full_layers"], m["kv_heads"]
    sim = m["similarity"]
    got = {(s, l) for s, l, _, _ in m["retrievals"]}
    n = len(m["retrievals"])
    rows = sum(r[2] for r in m["retrievals"]) / max(1, n)
    units = sum(r[3] for r in m["retrievals"]) / max(1, n) / max(1, H)
    compared = [x for x in sim if x is not None]
    print(f"{m['policy']}: {S} steps x {L - F} retrieval layers, {n} retrievals "
          f"({n / max(1, S * (L - F)):.3f} a layer and token), {rows:.0f} rows a KV head, "
          f"{units:.1f} units a head, r_t compared {len(compared)}"
          + (f" (mean {sum(compared) / len(compared):.3f}, min {min(compared):.3f})" if compared else ""))
    fails = 0
    if len(sim) != S * L:
        print("FAIL similarity size"); fails += 1
    if any(l < F for _, l in got):
        print("FAIL a full layer retrieved"); fails += 1
    if any(r[3] < H for r in m["retrievals"]):
        print("FAIL a retrieval with fewer units than KV heads"); fails += 1
    if m["tau"] >= 0:
        for s in range(S):
            for l in range(F, L):
                r = sim[s * L + l]
                want = s == 0 or (r is not None and r < m["tau"])
                if ((s, l) in got) != want or ((r is None) != (s == 0)):
                    fails += 1
        print(("FAIL " if fails else "OK ") + f"adaptive rule: {fails} (step, layer) pairs off")
    else:
        print(("FAIL " if fails else "OK ") + "map")
