"""Prints the QA table of this folder's eval JSON files beside the baselines of
../2026-11-24-cpu-policies (full, streaming, snapkv) on the same seeds: exact match overall and per
type, and EpiCache's routing (questions whose routed episode holds every evidence window)."""
import glob, json, os
here = os.path.dirname(os.path.abspath(__file__))
base = os.path.join(here, "..", "2026-11-24-cpu-policies")
types = ["single-hop", "multi-hop", "temporal", "knowledge-update", "unanswerable"]
rows = []
mine = sorted(glob.glob(os.path.join(here, "*.json")))
seeds = {json.load(open(f))["first_seed"] for f in mine}
for f in sorted(glob.glob(os.path.join(base, "*.json"))) + mine:
    j = json.load(open(f))
    if j["first_seed"] not in seeds:
        continue
    e = j.get("epicache") or {}
    routing = (f"{e['routing_accuracy']:.2f}" if e else "")
    rows.append((j["first_seed"], j["policy"], j.get("kv_budget", 0), j["exact_match"], j["per_type"],
                 j["peak_kv_tokens"], routing, j["time_to_first_token_ms"]["mean"]))
print("| seeds | policy | KV budget | peak KV | EM | " + " | ".join(types) +
      " | routing | TTFT ms |")
print("|---|---|---|---|---|" + "---|" * len(types) + "---|---|")
def key(r):
    order = {"full": 0, "streaming": 1, "snapkv": 2}
    return (r[0], r[2], order.get(r[1], 3), r[1])
for seed, pol, budget, em, per, peak, routing, ttft in sorted(rows, key=key):
    cells = " | ".join(f"{per[t]['exact_match']:.2f}" for t in types)
    print(f"| {seed}.. | {pol} | {budget or 'all'} | {peak} | **{em:.3f}** | {cells} | {routing} "
          f"| {ttft:.0f} |")
