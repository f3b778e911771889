#!/usr/bin/env python3
"""Averages the weights of model folders trained from the same starting point (a "model soup",
Wortsman et al. 2022) and saves the mean as a model folder of the same layout.

Why: engram-tiny is too small to keep the GPU busy; two training runs side by side each go as
fast as one alone, three at ~70% each (bench/results/2026-11-24-h100-engram-tiny-soup/). Runs warm-started from
one folder on the same round's data with different seeds stay in one basin, and their mean is a
better model than any of them without any more device time.

    python3 tools/average_models.py OUT_DIR MODEL_DIR MODEL_DIR [...]

Needs torch and transformers (the GPU machine). The first folder's tokenizer and generation
config are copied; every folder must have the same tensor names and shapes.
"""
import argparse
import os
import shutil

import torch
import transformers


def mean_state(states, names):
    """The element-wise mean of state dicts of one layout; a clear error names the folder whose
    tensor names or shapes differ (a soup of different architectures is meaningless)."""
    for s, name in zip(states[1:], names[1:]):
        if s.keys() != states[0].keys() or any(s[k].shape != states[0][k].shape for k in s):
            raise SystemExit(f"average_models: {name} does not have the layout of {names[0]}")
    return {k: sum(s[k] for s in states) / len(states) for k in states[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    if len(args.models) < 2:
        raise SystemExit("average_models: give at least two model folders")
    models = [transformers.LlamaForCausalLM.from_pretrained(m, torch_dtype=torch.float32)
              for m in args.models]
    models[0].load_state_dict(mean_state([m.state_dict() for m in models], args.models))
    os.makedirs(args.out, exist_ok=True)
    models[0].to(torch.bfloat16).save_pretrained(args.out, max_shard_size="15MB")
    for name in ("tokenizer.model", "generation_config.json"):
        src = os.path.join(args.models[0], name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
    print(f"averaged {len(args.models)} models into {args.out}")


if __name__ == "__main__":
    main()
