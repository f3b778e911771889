#!/usr/bin/env python3
"""Writes two drills that teach engram-tiny to look a fact up by its key, from a round's QA data.

Probing round 9 (model README, "Why QA is stuck") found no induction at all: after
"My uncle Leo, my sister Ines, ..." repeated in another order, the model gives "Leo" after
"my uncle" a probability of 0.01, and "What is the name of the user's uncle?" and "... sister?"
get the same answer distribution (unknown 0.9, then every name of the history). The corpus is
so templated that recency and answer-type priors pay off; nothing forces a lookup by key. The
drills make the key the only way to the answer:

  qa_drill.jsonl.xz — recall: short histories assembled from the fact lines of several training
      histories (a relation and its name, city and job; a pet and its kind; a favorite; a trip),
      every key distinct, with a question on each fact and unanswerable questions on keys of the
      same templates that are absent (~1/3 of the answers), in the packed QA format of
      tools/pack_qa_records.py;
  drill_copy.jsonl.xz — copy: a block of history lines, then the same lines in another order as
      the target (kind "drill": loss on the repeat only), where every token after a line's first
      few must be copied from the block.

Only training data goes in (the round's qa_*.jsonl.xz, seeds below the evaluation's), so the
held-out evaluation stays held out.

    python3 tools/make_recall_drills.py DATA_DIR --seed R [--recall 30000] [--copy 20000]
"""
import argparse
import collections
import glob
import json
import lzma
import os
import random
import re

NAME_OF = re.compile(r"^What is the name of the user's (\w+)\?$")
FAVORITE = re.compile(r"^What is the user's favorite ([\w ]+)\?$")
TRIP = re.compile(r"^Where did the user go on the ([\w ]+ trip)\?$")
SUFFIX = "\nQuestion: {}\nAnswer:"


def question_of(suffix):
    return suffix.split("\nQuestion: ", 1)[1].rsplit("\nAnswer:", 1)[0]


def paired_lines(history):
    """[(user line, the assistant's reply or None)] of a history."""
    lines = history.split("\n")
    out = []
    for i, line in enumerate(lines):
        if line.startswith("User said, "):
            reply = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("Assistant said, ") else None
            out.append((line, reply))
    return out


def lines_with(pairs, word):
    pattern = re.compile(r"\b" + re.escape(word) + r"\b")
    return [p for p in pairs if pattern.search(p[0])]


def units_of(history, qa):
    """Facts of one history that a lookup answers: (keys, names, lines, [(question, answer)]).
    keys must be unique in a drill history (two uncles would make the question ambiguous),
    names too (a pet and a person both called Leo)."""
    pairs = paired_lines(history)
    answers = {question_of(s): a for s, a in qa}
    units = []
    for q, a in answers.items():
        if a == "unknown":
            continue
        m = NAME_OF.match(q)
        if m:
            key = m.group(1)
            kind_q = f"What kind of animal is {a}?"
            if kind_q in answers:  # a pet: "My rabbit Marbles ..."
                ev = lines_with(pairs, a)[:1]
                if ev and key in ev[0][0]:
                    units.append(({"pet:" + key}, {a}, ev, [(q, a), (kind_q, key)]))
                continue
            ev = lines_with(pairs, a)  # a person: the introduction, then city and job lines
            if not ev or key not in ev[0][0]:
                continue
            facts, lines = [(q, a)], [ev[0]]
            for extra in (f"Which city does the user's {key} live in?",
                          f"What does the user's {key} do for work?"):
                found = [p for p in ev[1:] if extra in answers and answers[extra] in p[0]]
                if found:
                    facts.append((extra, answers[extra]))
                    lines.append(found[0])
            units.append(({"rel:" + key}, {a}, lines, facts))
            continue
        m = FAVORITE.match(q)
        if m:
            ev = [p for p in pairs if "favorite " + m.group(1) in p[0] and a in p[0]]
            if len(ev) == 1:
                units.append(({"fav:" + m.group(1)}, set(), ev, [(q, a)]))
            continue
        m = TRIP.match(q)
        if m:
            ev = [p for p in pairs if m.group(1) in p[0] and a in p[0]]
            if len(ev) == 1:
                units.append(({"trip:" + m.group(1)}, set(), ev, [(q, a)]))
    return units


def read_groups(data_dir):
    for path in sorted(glob.glob(os.path.join(data_dir, "qa_*.jsonl.xz"))):
        if os.path.basename(path).startswith("qa_drill"):
            continue
        with lzma.open(path, "rt") as f:
            for line in f:
                e = json.loads(line)
                if e.get("kind") == "qa" and "history" in e:
                    yield e["history"], e["qa"]


def unanswerable(keys_present, pools, rng, n):
    """Questions of the same templates on keys that no fact of the drill history has."""
    choices = []
    for rel in pools["rel"]:
        if "rel:" + rel not in keys_present and "pet:" + rel not in keys_present:
            choices.append(f"What is the name of the user's {rel}?")
    for kind in pools["pet"]:
        if "pet:" + kind not in keys_present and "rel:" + kind not in keys_present:
            choices.append(f"What is the name of the user's {kind}?")
    for cat in pools["fav"]:
        if "fav:" + cat not in keys_present:
            choices.append(f"What is the user's favorite {cat}?")
    for trip in pools["trip"]:
        if "trip:" + trip not in keys_present:
            choices.append(f"Where did the user go on the {trip}?")
    rng.shuffle(choices)
    return [(q, "unknown") for q in choices[:n]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--recall", type=int, default=30000, help="drill histories to write")
    ap.add_argument("--copy", type=int, default=20000, help="copy records to write")
    args = ap.parse_args()
    rng = random.Random(args.seed)

    units, headers, blocks = [], [], []
    pools = collections.defaultdict(set)
    for history, qa in read_groups(args.data_dir):
        # The instruction line, a blank line and "Session 1 (date)".
        headers.append("\n".join(history.split("\n", 3)[:3]))
        for u in units_of(history, qa):
            units.append(u)
            for k in u[0]:
                kind, _, key = k.partition(":")
                pools[kind].add(key)
        if len(blocks) < 4 * args.copy:
            blocks.append(paired_lines(history))
    pools = {k: sorted(v) for k, v in pools.items()}
    for k in ("rel", "pet", "fav", "trip"):
        pools.setdefault(k, [])

    counts = collections.Counter()
    with lzma.open(os.path.join(args.data_dir, "qa_drill.jsonl.xz"), "wt", preset=6) as out:
        for _ in range(args.recall):
            want = rng.randint(4, 12)
            keys, names, chosen = set(), set(), []
            for _ in range(want * 4):
                u = units[rng.randrange(len(units))]
                if u[0] & keys or u[1] & names:
                    continue
                keys |= u[0]
                names |= u[1]
                chosen.append(u)
                if len(chosen) == want:
                    break
            # Interleave the units' lines, each unit's in its own order (an introduction
            # comes before the city the person lives in).
            queues = [list(u[2]) for u in chosen]
            lines = []
            while any(queues):
                q = rng.choice([q for q in queues if q])
                user, reply = q.pop(0)
                lines.append(user)
                if reply:
                    lines.append(reply)
            facts = [f for u in chosen for f in u[3]]
            facts += unanswerable(keys, pools, rng, max(1, len(facts) // 2))
            rng.shuffle(facts)
            for q, a in facts:
                counts["unknown" if a == "unknown" else "answerable"] += 1
            history = rng.choice(headers) + "\n" + "\n".join(lines) + "\n"
            out.write(json.dumps({"kind": "qa", "history": history,
                                  "qa": [[SUFFIX.format(q), a] for q, a in facts]}) + "\n")

    with lzma.open(os.path.join(args.data_dir, "drill_copy.jsonl.xz"), "wt", preset=6) as out:
        for _ in range(args.copy):
            pairs = rng.choice(blocks)
            n = min(len(pairs), rng.randint(4, 12))
            start = rng.randrange(len(pairs) - n + 1)
            block = pairs[start:start + n]
            again = block[:]
            rng.shuffle(again)
            text = lambda ps: "\n".join(line for p in ps for line in p if line)
            out.write(json.dumps({"kind": "drill", "prompt": text(block) + "\n\n",
                                  "target": text(again)}) + "\n")
            counts["copy"] += 1
    print(json.dumps({"units": len(units), "pools": {k: len(v) for k, v in pools.items()},
                      "written": dict(counts)}))


if __name__ == "__main__":
    main()
