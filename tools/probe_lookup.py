#!/usr/bin/env python3
"""Probes whether a model looks facts up by key, through the engine (engram-cli logits, CPU).

Three measurements: copy — random pieces written twice, the mean loss (nats) on the repeat's
pieces 2..L (chance is ln 3,837 = 8.25; a model with an induction head gets near 0); and two on
small histories built here from a seed (names and relations of the
conversation world, none of them a held-out history):
  induction — a list "my uncle Leo, my sister Ines, ..." and then the same pairs in another
      order: the mean probability of each name right after "my <relation>" in the repeat
      (a model that copies by key gives ~1; one that does not gives ~1/len(vocabulary of names));
  lookup — a history of four relation introductions in the corpus's sentences, then "What is
      the name of the user's <relation>?" for each of them (top-1 accuracy) and for four absent
      relations (share of "unknown" as top-1). A model that ignores the key answers all eight
      the same way.

    python3 tools/probe_lookup.py MODEL_DIR [--trials 20] [--seed 1] [--cli build/app/cli/engram-cli]

Prints JSON. Needs numpy and sentencepiece (python3-numpy, python3-sentencepiece).
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

import numpy as np
import sentencepiece as spm

RELATIONS = ["sister", "brother", "cousin", "uncle", "aunt", "niece", "nephew", "roommate"]
NAMES = ["Leo", "Ines", "Omar", "Maya", "Hugo", "Priya", "Mateo", "Julia", "Rafael", "Nora",
         "Ethan", "Chloe", "Kofi", "Mei", "Zoe", "Theo"]
INTRODUCTIONS = [
    ('I had lunch with my {r} {n} this week.', 'That is lovely. Say hi to {n}!'),
    ('My {r} is called {n}.', 'It is nice that you and {n} stay close.'),
    ('My {r}, {n}, is coming to visit next month.', 'That is lovely. Say hi to {n}!'),
]
HEADER = ("Answer from the conversation in a few words, or say unknown if it never came up.\n\n"
          "Session 1 (May 7, 2023)\n")


class Model:
    def __init__(self, cli, model_dir):
        self.cli, self.dir = cli, model_dir
        self.sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
        self.tmp = tempfile.mkdtemp()

    def probs(self, text):
        """[position, vocabulary] next-token probabilities for BOS + encode(text)."""
        ids = [self.sp.bos_id()] + self.sp.encode(text)
        return ids, self.probs_ids(ids)

    def probs_ids(self, ids):
        out = os.path.join(self.tmp, "l.npy")
        subprocess.run([self.cli, "logits", "--model", self.dir, "--ids", ",".join(map(str, ids)),
                        "--out", out], check=True, capture_output=True)
        logits = np.load(out).reshape(len(ids), -1).astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)


def induction(model, rng, trials):
    scores = []
    for _ in range(trials):
        pairs = list(zip(rng.sample(RELATIONS, 5), rng.sample(NAMES, 5)))
        again = pairs[:]
        rng.shuffle(again)
        first = ", ".join(f"my {r} {n}" for r, n in pairs)
        prefix = HEADER + f'User said, "{first}."\nUser said, "'
        text = prefix
        targets = []  # (character offset where the name starts, name)
        for i, (r, n) in enumerate(again):
            text += ("" if i == 0 else ", ") + f"my {r} "
            targets.append((len(text), n))
            text += n
        ids, p = model.probs(text + '."')
        for offset, name in targets:
            head = model.sp.encode(text[:offset].rstrip(" "))
            name_id = model.sp.encode(text[:offset] + name)[len(head)]
            scores.append(float(p[len(head), name_id]))  # p row j predicts ids[j + 1]
    return float(np.mean(scores))


def copy_loss(model, rng, trials, length=100):
    losses = []
    for _ in range(trials):
        r = [rng.randrange(259, model.sp.get_piece_size()) for _ in range(length)]
        ids = [model.sp.bos_id()] + r + r
        p = model.probs_ids(ids)
        # row j predicts ids[j + 1]; the repeat's pieces 2..L are ids[L + 2 .. 2L]
        losses += [-np.log(p[j, ids[j + 1]]) for j in range(length + 1, 2 * length)]
    return float(np.mean(losses))


def lookup(model, rng, trials):
    hits, unknown, n_present, n_absent = 0, 0, 0, 0
    first = lambda word: model.sp.encode("Answer: " + word)[len(model.sp.encode("Answer:"))]
    unknown_id = first("unknown")
    for _ in range(trials):
        rels = rng.sample(RELATIONS, 8)
        present, absent = rels[:4], rels[4:]
        names = rng.sample(NAMES, 4)
        history = HEADER
        for r, n in zip(present, names):
            said, reply = rng.choice(INTRODUCTIONS)
            history += (f'User said, "{said.format(r=r, n=n)}"\n'
                        f'Assistant said, "{reply.format(n=n)}"\n')
        for r, n in list(zip(present, names)) + [(r, None) for r in absent]:
            ids, p = model.probs(history + f"\nQuestion: What is the name of the user's {r}?\nAnswer:")
            top = int(np.argmax(p[-1]))
            if n is None:
                n_absent += 1
                unknown += top == unknown_id
            else:
                n_present += 1
                hits += top == first(n)
    return hits / n_present, unknown / n_absent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cli", default="build/app/cli/engram-cli")
    args = ap.parse_args()
    model = Model(args.cli, args.model)
    rng = random.Random(args.seed)
    copy = copy_loss(model, rng, 3)
    ind = induction(model, rng, args.trials)
    hit, unk = lookup(model, rng, args.trials)
    print(json.dumps({"model": args.model, "trials": args.trials, "seed": args.seed,
                      "copy_random_repeat_loss": round(copy, 4),
                      "induction_name_probability": round(ind, 4),
                      "lookup_present_top1": round(hit, 4),
                      "lookup_absent_unknown_top1": round(unk, 4)}))


if __name__ == "__main__":
    main()
