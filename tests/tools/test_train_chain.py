#!/usr/bin/env python3
"""tools/train_engram_tiny_chain.py, the one command that makes engram-tiny: its plan must be
whole (every model a step starts from and every data folder it reads made by an earlier step,
the shipped step last), a broken plan must be refused, and --dry-run must print every step.

    test_train_chain.py TOOLS_DIR
"""
import os
import subprocess
import sys

sys.path.insert(0, sys.argv[1])
import train_engram_tiny_chain as chain  # noqa: E402

assert chain.check_plan(chain.STEPS) == [], chain.check_plan(chain.STEPS)
names = [n for n, _, _ in chain.STEPS]
assert names[-1] == chain.FINAL
rounds = [n for n in names if n.startswith("data") and n[4:].isdigit() and int(n[4:]) >= 3]
assert rounds == [f"data{r}" for r in range(3, 15) if r != 4], rounds  # 4 is data4a + data4b

# mutations the check must catch: a step moved before what it needs, a data step lost
moved = list(chain.STEPS)
moved.insert(0, moved.pop(names.index("r5")))
assert any("r5" in p for p in chain.check_plan(moved)), "a step before its start model passed"
lost = [s for s in chain.STEPS if s[0] != "data13"]
assert any("data13" in p for p in chain.check_plan(lost)), "a missing data folder passed"
twice = chain.STEPS + [chain.STEPS[-1]]
assert chain.check_plan(twice), "a step made twice passed"

# the soups' mean is the next step's start; the last step's mean is the shipped model
work = "/w"
lines = chain.commands("soup13", "soup", dict(chain.STEPS[names.index("soup13")][2]), work, "cli", "b")
assert "/w/soup12/m-soup|21|" in lines[-1], lines
assert chain.model_dir(work, chain.FINAL) == "/w/soup15/m-soup"

out = subprocess.run([sys.executable, os.path.join(sys.argv[1], "train_engram_tiny_chain.py"),
                      "--dry-run"], capture_output=True, text=True, check=True).stdout
printed = [l[3:] for l in out.splitlines() if l.startswith("== ")]
assert printed == names, printed
print(f"train chain: {len(names)} steps, plan whole, mutations refused")
