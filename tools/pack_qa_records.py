#!/usr/bin/env python3
"""Groups the QA records of `engram-cli export conversation` by their shared history.

Every QA record repeats its conversation's history (~3,000 tokens) before one question; a
conversation with 30 questions is 30 copies. The trainer packs them anyway (one history, many
answers), so the data can travel grouped: one line per history,

    {"kind": "qa", "history": TEXT, "qa": [[SUFFIX, ANSWER], ...]}

where history + SUFFIX is exactly the original prompt. Chat records pass through unchanged.
--max-per-type caps the questions of one type per history (the generator can make many
unanswerable questions; the evaluation asks 3 per type); --type-cap TYPE=N overrides it for one
type. An extra question costs ~15 tokens against a history of ~3,000, so keeping every
single-hop and temporal question multiplies the supervision of the hard types almost for free.

    python3 tools/pack_qa_records.py IN.jsonl OUT.jsonl.xz [--max-per-type 8] \
        [--type-cap unanswerable=6 ...]
"""
import argparse
import collections
import json
import lzma

QUESTION_MARK = "\nQuestion: "


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--max-per-type", type=int, default=0)
    ap.add_argument("--type-cap", action="append", default=[], metavar="TYPE=N")
    args = ap.parse_args()
    caps = collections.defaultdict(lambda: args.max_per_type)
    for item in args.type_cap:
        name, _, n = item.partition("=")
        caps[name] = int(n)
    groups = collections.OrderedDict()
    counts = collections.Counter()
    with lzma.open(args.output, "wt", preset=9) as out, open(args.input) as f:
        for line in f:
            e = json.loads(line)
            if e.get("kind") != "qa":
                out.write(line)
                continue
            cut = e["prompt"].rfind(QUESTION_MARK)
            history = e["prompt"][:cut]
            group = groups.setdefault(history, {"types": collections.Counter(), "qa": []})
            if caps[e["type"]] and group["types"][e["type"]] >= caps[e["type"]]:
                continue
            group["types"][e["type"]] += 1
            counts[e["type"]] += 1
            group["qa"].append([e["prompt"][cut:], e["target"]])
        for history, group in groups.items():
            out.write(json.dumps({"kind": "qa", "history": history, "qa": group["qa"]}) + "\n")
    print(json.dumps({"histories": len(groups), "questions": dict(counts)}))


if __name__ == "__main__":
    main()
