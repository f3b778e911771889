"""Prints this folder's QA table: exact match overall and per type, peak KV slots per layer and the
pair budget M (tokens per KV head attention keeps per layer after each shrink)."""
import glob, json, os, re
here = os.path.dirname(os.path.abspath(__file__))
types = ["single-hop", "multi-hop", "temporal", "knowledge-update", "unanswerable"]
rows = []
for f in sorted(glob.glob(os.path.join(here, "*.json"))):
    j = json.load(open(f))
    m = re.search(r"layers=(\d+)", j["policy"])
    pairs = int(m.group(1)) if m else j["kv_budget"]
    sel = "2 (joint)" if "per_head=2" in j["policy"] else "1 (per head)"
    name = re.sub(r"layers=(\d+)(,\1)*", r"layers=\1x10", j["policy"])
    rows.append((pairs, j["kv_budget"], sel, name, j["peak_kv_tokens"], j["exact_match"],
                 j["per_type"], j["episodes"], j["questions"]))
print("| M (pairs / head) | KV budget (slots) | per_head | policy | peak KV | EM | " +
      " | ".join(types) + " |")
print("|---|---|---|---|---|---|" + "---|" * len(types))
for pairs, budget, sel, name, peak, em, per, conv, q in sorted(rows):
    cells = " | ".join(f"{per[t]['exact_match']:.2f}" for t in types)
    print(f"| {pairs} | {budget} | {sel} | `{name}` | {peak} | **{em:.3f}** | {cells} |")
print(f"\n{rows[0][7]} conversations, {rows[0][8]} questions per row")
