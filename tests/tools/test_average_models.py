#!/usr/bin/env python3
"""tools/average_models.py's mean without a GPU (torch and transformers stubbed; a small vector
class stands in for tensors): the mean is element-wise over every tensor, and folders of different
layouts are refused by name.

    test_average_models.py TOOLS_DIR
"""
import random
import sys
import types

for name in ("torch", "transformers"):
    sys.modules[name] = types.ModuleType(name)
sys.path.insert(0, sys.argv[1])
import average_models  # noqa: E402



class Vec:
    """Just what mean_state uses of a tensor: shape, +, / by a number (sum() starts at 0)."""
    def __init__(self, values):
        self.values = list(values)
        self.shape = (len(self.values),)

    def __add__(self, other):
        if other == 0:
            return self
        return Vec(a + b for a, b in zip(self.values, other.values))

    __radd__ = __add__

    def __truediv__(self, n):
        return Vec(a / n for a in self.values)


def close(x, y):
    return all(abs(a - b) < 1e-12 for a, b in zip(x.values, y.values))


rng = random.Random(0)
def normal(n):
    return Vec(rng.gauss(0, 1) for _ in range(n))


states = [{"a": normal(12), "b": normal(5)} for _ in range(3)]
mean = average_models.mean_state(states, ["x", "y", "z"])
assert mean.keys() == states[0].keys()
for k in mean:
    expect = (states[0][k] + states[1][k] + states[2][k]) / 3
    assert close(mean[k], expect), f"{k} is not the element-wise mean"
    assert not close(mean[k], states[0][k]), f"{k} is the first model's, not the mean"

for bad in ({"a": states[0]["a"]}, {"a": states[0]["a"], "b": normal(6)}):
    try:
        average_models.mean_state([states[0], bad], ["first", "second"])
    except SystemExit as e:
        assert "second" in str(e), f"the error does not name the folder: {e}"
    else:
        raise AssertionError("a folder of another layout was averaged")
print("average_models: mean and layout check pass")
