#!/usr/bin/env python3
"""tools/make_recall_drills.py on data exported by engram-cli: every drill answer is what its
history says (an answerable question's answer sits on a line with its key; an "unknown" one's key
is in no line), keys are never repeated within a history, and the copy drill's target is its
prompt's lines in another order.

    test_recall_drills.py ENGRAM_CLI TOOLS_DIR
"""
import collections
import json
import lzma
import os
import re
import subprocess
import sys
import tempfile

cli, tools = sys.argv[1], sys.argv[2]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def has_phrase(line, phrase):
    w, p = words(line), words(phrase)
    return any(w[i:i + len(p)] == p for i in range(len(w) - len(p) + 1))


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    subprocess.run([cli, "export", "conversation", "--conversations", "40", "--seed", "5000",
                    "--questions-per-type", "1000", "--min-tokens", "150", "--max-tokens", "500",
                    "--out", os.path.join(tmp, "tiny.jsonl")], check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(tools, "pack_qa_records.py"),
                    os.path.join(tmp, "tiny.jsonl"), os.path.join(data, "qa_tiny.jsonl.xz"),
                    "--type-cap", "unanswerable=10"], check=True, capture_output=True)
    run = subprocess.run([sys.executable, os.path.join(tools, "make_recall_drills.py"), data,
                          "--seed", "3", "--recall", "150", "--copy", "30"],
                         check=True, capture_output=True, text=True)
    summary = json.loads(run.stdout)
    check(summary["written"]["answerable"] > 150 and summary["written"]["unknown"] > 50,
          f"too few drill questions: {summary}")

    kinds = collections.Counter()
    with lzma.open(os.path.join(data, "qa_drill.jsonl.xz"), "rt") as f:
        records = [json.loads(line) for line in f]
    check(len(records) == 150, f"{len(records)} drill histories, want 150")
    for rec in records:
        lines = [l for l in rec["history"].split("\n") if l.startswith("User said, ")]
        check(rec["history"].startswith("Answer from the conversation"), "history lacks the instruction")
        qa = {s.split("Question: ")[1].split("\n")[0]: a for s, a in rec["qa"]}
        check(len(qa) == len(rec["qa"]), "a question asked twice in one history")
        names = {}
        for q, a in qa.items():
            m = re.match(r"What is the name of the user's (\w+)\?$", q)
            if m:
                kinds["name"] += 1
                key = m.group(1)
                if a == "unknown":
                    check(not any(has_phrase(l, key) for l in lines), f"{key} is in the history: {q}")
                else:
                    hits = [l for l in lines if has_phrase(l, key) and has_phrase(l, a)]
                    check(len(hits) >= 1, f"no line with {key} and {a}")
                    names[key] = a
                continue
            m = re.match(r"What kind of animal is (\w+)\?$", q)
            if m:
                kinds["kind"] += 1
                check(any(has_phrase(l, m.group(1)) and has_phrase(l, a) for l in lines),
                      f"no line with {m.group(1)} and {a}")
                continue
            m = re.match(r"What is the user's favorite ([\w ]+)\?$", q)
            if m:
                kinds["favorite"] += 1
                said = [l for l in lines if has_phrase(l, "favorite " + m.group(1))]
                if a == "unknown":
                    check(not said, f"favorite {m.group(1)} is in the history")
                else:
                    check(len(said) == 1 and has_phrase(said[0], a), f"favorite {m.group(1)} != {a}")
                continue
            m = re.match(r"Where did the user go on the ([\w ]+ trip)\?$", q)
            if m:
                kinds["trip"] += 1
                said = [l for l in lines if has_phrase(l, m.group(1))]
                check(said == [] if a == "unknown" else len(said) == 1 and has_phrase(said[0], a),
                      f"{q} -> {a}")
                continue
            m = re.match(r"(?:Which city does the user's (\w+) live in|What does the user's (\w+) do for work)\?$", q)
            check(m is not None, f"unexpected drill question {q}")
            if m:
                kinds["city or job"] += 1
                key = m.group(1) or m.group(2)
                check(key in names or qa.get(f"What is the name of the user's {key}?") not in (None, "unknown"),
                      f"{q} without the relative's name")
        for key, name in names.items():
            check(sum(has_phrase(l, key) for l in lines) == 1 or
                  all(has_phrase(l, name) for l in lines if has_phrase(l, key)),
                  f"two introductions of a {key}")
        for q, a in qa.items():
            m = re.match(r"(?:Which city does the user's (\w+) live in|What does the user's (\w+) do for work)\?$", q)
            if m:
                name = names.get(m.group(1) or m.group(2))
                check(name is not None and any(has_phrase(l, name) and has_phrase(l, a) for l in lines),
                      f"{q} -> {a}: no line with the relative and the answer")
    for k in ("name", "kind", "favorite", "city or job"):
        check(kinds[k] > 0, f"no {k} question in the drills")

    with lzma.open(os.path.join(data, "drill_copy.jsonl.xz"), "rt") as f:
        copies = [json.loads(line) for line in f]
    check(len(copies) == 30, f"{len(copies)} copy records, want 30")
    for c in copies:
        check(c["kind"] == "drill" and c["prompt"].endswith("\n\n"), "copy record format")
        check(sorted(c["prompt"].strip("\n").split("\n")) == sorted(c["target"].split("\n")),
              "the copy target is not the prompt's lines")

for f in failures[:20]:
    print("FAIL:", f)
print(f"{len(failures)} failures; questions checked: {dict(kinds)}")
sys.exit(1 if failures else 0)
