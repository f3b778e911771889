#!/usr/bin/env python3
"""The trainer's batching (tools/train_engram_tiny.py) without a GPU: torch, transformers and
sentencepiece are stubbed (batching is plain Python). drill_first must keep every example exactly
once, never mix drill and data in a batch, give the first steps the asked share of drill batches,
and batches must stay within their token budget.

    test_trainer_batches.py TOOLS_DIR
"""
import random
import sys
import types

for name in ("torch", "transformers", "sentencepiece"):
    sys.modules[name] = types.ModuleType(name)
sys.path.insert(0, sys.argv[1])
import train_engram_tiny as trainer  # noqa: E402


class Pieces:
    def bos_id(self):
        return 1

    def eos_id(self):
        return 2

    def get_piece_size(self):
        return 4096


rng = random.Random(0)
encoded = trainer.induction_drill(Pieces(), 20000, 1)
for ids, mask, kind in encoded[:200]:
    half = (len(ids) - 2) // 2
    assert ids[1:1 + half] == ids[1 + half:-1], "the drill's second half is not a copy"
    assert mask == [0] * (1 + half) + [1] * (half + 1), "the loss is not on the repeat"
encoded += [([1] + [5] * rng.randint(20, 3000), [0] * 10, "qa") for _ in range(20000)]
rng.shuffle(encoded)
budget = 65536

plain = trainer.batches(encoded, budget, random.Random(1))
assert sorted(i for b in plain for i in b) == list(range(len(encoded))), "batches lose examples"
assert all(len(b) == 1 or len(b) * max(len(encoded[i][0]) for i in b) <= budget for b in plain)

out = trainer.drill_first(encoded, budget, 200, 0.5, random.Random(2))
assert sorted(i for b in out for i in b) == list(range(len(encoded))), "drill_first loses examples"
assert all(len({encoded[i][2] for i in b}) == 1 for b in out), "a batch mixes drill and data"
share = sum(encoded[b[0]][2] == "induction" for b in out[:200]) / 200
later = sum(encoded[b[0]][2] == "induction" for b in out[200:]) / len(out[200:])
assert 0.4 <= share <= 0.6, f"first 200 steps: {share:.2f} drill, want ~0.5"
assert later < share, f"the drill is not concentrated first ({share:.2f} then {later:.2f})"
print(f"{len(out)} batches; drill share {share:.2f} in the first 200 steps, {later:.2f} after")
