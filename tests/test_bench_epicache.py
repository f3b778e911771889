#!/usr/bin/env python3
"""engram-cli bench epicache on the bundled model with small numbers: every method runs and is
timed, the counts add up, and EpiCache's peak memory is below full KV's (the point of block
prefill under a budget). Times are never compared with each other (style rule 10).
Usage: test_bench_epicache.py ENGRAM_CLI MODEL_DIR"""
import json
import os
import subprocess
import sys
import tempfile

cli, model = sys.argv[1], sys.argv[2]
TURNS = 5


def run(*flags):
    return subprocess.run([cli, "bench", "epicache", "--model", model, *flags],
                          capture_output=True, text=True, timeout=300)


def check(ok, what):
    if not ok:
        print("FAIL:", what)
        sys.exit(1)


# A history that cannot fit the positions with full KV is refused, naming the flags.
bad = run("--history-tokens", "4000", "--turns", "20")
check(bad.returncode == 2 and "--history-tokens" in bad.stderr, "too long refused: " + bad.stderr)

with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "epicache.json")
    r = run("--history-tokens", "1000", "--turns", str(TURNS), "--kv-budget", "128",
            "--decode-tokens", "8", "--full-turns", "1", "--sweep", "300,1000", "--json", out)
    check(r.returncode == 0, "bench epicache failed: " + r.stderr[-2000:])
    j = json.load(open(out))

check(j["benchmark"] == "engram-epicache" and "date" in j, "header")
check(j["history_tokens"] >= 1000, "history reaches the target: %d" % j["history_tokens"])
m = j["methods"]
check(set(m) == {"epicache", "prefix", "full"}, "every method: %s" % sorted(m))

e = m["epicache"]
st = e["stages"]
check(e["total_ms"] > 0 and e["per_turn_ms_mean"] > 0, "epicache times")
check(len(e["turn_ms"]) == TURNS and all(t > 0 for t in e["turn_ms"]), "epicache turn times")
check(st["embed_windows"]["count"] == 1 and st["embed_windows"]["ms"] > 0, "windows embedded once")
check(st["cluster"]["count"] >= 1, "clustered")
check(st["build_prefill"]["count"] >= 1 and st["build_prefill"]["ms"] > 0, "an episode built")
check(st["decode"]["count"] == TURNS and st["decode"]["ms"] > 0, "decode every turn")
check(st["build_prefill"]["count"] + st["turn_prefill"]["count"] == TURNS, "prefill per turn")
check(st["retrieval_writeback"]["count"] + st["other"]["count"] == TURNS, "rest per turn")
check(st["embed_windows"]["count"] + st["match"]["count"] == TURNS, "embedding per turn")
check(sum(e["turns_per_episode"].values()) == TURNS, "every turn routed")
check(e["episodes"] >= 1 and all(0 <= x < e["episodes"] for x in e["routed_episode_per_turn"]),
      "routes name episodes")
check(e["peak_kv_tokens"] <= 128 + 512 + 128, "KV per layer bounded: %d" % e["peak_kv_tokens"])

p = m["prefix"]
check(p["history_prefill_ms"] > 0 and p["history_prefill_tokens"] == j["history_tokens"],
      "prefix prefills the history once")
check(p["total_ms"] > p["turns_ms"] > 0 and len(p["turn_ms"]) == TURNS, "prefix times")

f = m["full"]
check(f["measured_turns"] == 1 and f["per_turn_ms_mean"] > 0, "full re-prefill measured")
check(f["prompt_tokens"][0] > j["history_tokens"], "full re-prefill prefills the history")
check(abs(f["projected_total_ms"] - TURNS * f["per_turn_ms_mean"]) < 1e-6 * f["projected_total_ms"],
      "projection = mean x T")

peak = {k: v["memory"]["peak_bytes"] for k, v in m.items()}
check(all(v > 0 for v in peak.values()), "peak memory measured: %s" % peak)
check(peak["epicache"] < peak["full"] and peak["epicache"] < peak["prefix"],
      "epicache peak below full KV: %s" % peak)
for k in ("latency_full_projected_over_epicache", "latency_prefix_over_epicache",
          "peak_memory_full_over_epicache"):
    check(j["ratios"].get(k, 0) > 0, "ratio " + k)

rows = j["sweep"]
check([r["history_tokens_target"] for r in rows] == [300, 1000], "sweep rows")
for r in rows:
    check(r["episode_build"]["build_prefill_ms"] > 0 and r["full_prefill"]["prefill_ms"] > 0,
          "sweep times")
    check(r["full_prefill"]["prefilled_tokens"] == r["history_tokens"], "sweep full prefill")
last = rows[-1]
check(last["episode_build"]["memory"]["peak_bytes"] < last["full_prefill"]["memory"]["peak_bytes"],
      "episode build peak below a full prefill at the longest history")
print("ok: epicache %.0f ms, prefix %.0f ms, full (projected) %.0f ms; peak %s" %
      (e["total_ms"], p["total_ms"], f["projected_total_ms"], peak))
