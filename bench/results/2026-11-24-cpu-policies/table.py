"""Prints the QA table of this folder's eval JSON files (exact match overall and per type)."""
import glob, json, os
here = os.path.dirname(os.path.abspath(__file__))
rows = []
for f in sorted(glob.glob(os.path.join(here, "*.json"))):
    j = json.load(open(f))
    rows.append((j["first_seed"], j["policy"], j.get("kv_budget", 0), j["exact_match"], j["per_type"],
                 j["peak_kv_tokens"], j["history_tokens_mean"], j["questions"]))
types = ["single-hop", "multi-hop", "temporal", "knowledge-update", "unanswerable"]
print("| seeds | policy | KV budget | peak KV | EM | " + " | ".join(types) + " |")
print("|---|---|---|---|---|" + "---|" * len(types))
order = {"full": 0, "streaming": 1, "snapkv": 2}
for seed, pol, budget, em, per, peak, hist, q in sorted(rows, key=lambda r: (r[0], order[r[1]], r[2])):
    cells = " | ".join(f"{per[t]['exact_match']:.2f}" for t in types)
    print(f"| {seed}.. | {pol} | {budget or 'all'} | {peak} | **{em:.3f}** | {cells} |")
