#!/usr/bin/env python3
"""engram-tiny from nothing to the shipped folder, as one command: every data step and every
training step that made resources/models/engram-tiny, in order, with the seeds, minutes and
flags they ran with (resources/models/engram-tiny/README.md, "How it was made").

    python3 tools/train_engram_tiny_chain.py --dry-run            # the plan, checked
    python3 tools/train_engram_tiny_chain.py [--from STEP] [--work DIR] [--cli PATH]

Run from the repository root on a machine with a CUDA GPU, PyTorch, transformers and
sentencepiece, and an engram-cli build (tools/eval_on_device.sh --build-only makes one at
/tmp/engram-build). Data goes to .device/dataN (the trainer's stage 1 and 2 read .device/data1
and .device/data2), models to --work/STEP. About 100 minutes of training on an H100 (the steps
were run one device call at a time; this script chains those calls). Training steps stop on a
time budget, not a step count, so a rerun on other hardware trains a similar, not a bit-identical
model; the held-out evaluation is the measure (tools/eval_on_device.sh).
"""
import argparse
import os
import shutil
import subprocess
import sys

DAGGER = "tools/data/embodied_dagger_r5.jsonl.gz"

# (name, kind, spec). kind "data": shell lines ({cli} is engram-cli). kind "train": a
# tools/train_on_device.sh stage (init/data/seed/lr/extra/minutes). kind "drill":
# tools/induction_check.py from init. kind "soup": three runs side by side, averaged.
STEPS = [
    ("data1", "data", [
        "mkdir -p .device/data1",
        "{cli} export embodied --out .device/data1/embodied.jsonl --sessions 1500 --seed 100000 "
        "--detours 0.1",
        "{cli} export conversation --conversations 4000 --seed 1 --chat-per-conversation 4 "
        "--out .device/data1/conversation.jsonl",
        "gzip -f .device/data1/*.jsonl"]),
    ("data2", "data", [
        "mkdir -p .device/data2",
        "{cli} export conversation --conversations 4000 --seed 4001 --chat-per-conversation 1 "
        "--questions-per-type 8 --min-tokens 600 --max-tokens 2000 --out .device/short.jsonl",
        "{cli} export conversation --conversations 8000 --seed 8001 --chat-per-conversation 1 "
        "--questions-per-type 8 --out .device/long.jsonl",
        "python3 tools/pack_qa_records.py .device/short.jsonl .device/data2/qa_short.jsonl.xz "
        "--max-per-type 6",
        "python3 tools/pack_qa_records.py .device/long.jsonl .device/data2/qa_long.jsonl.xz "
        "--max-per-type 6",
        "{cli} export embodied --out .device/embodied2.jsonl --sessions 400 --seed 101500 "
        "--detours 0.1",
        "gzip -c .device/embodied2.jsonl > .device/data2/embodied.jsonl.gz"]),
    ("data3", "data", ["bash tools/make_training_data.sh .device/data3 3 {build}"]),
    ("data4a", "data", ["PHASE=tiny bash tools/make_training_data.sh .device/data4a 4 {build}"]),
    ("data4b", "data", ["bash tools/make_training_data.sh .device/data4 4 {build}",
                        "mkdir -p .device/data4b",
                        "cp .device/data4/* .device/data4a/qa_tiny.jsonl.xz .device/data4b/"]),
    ("data5", "data", ["bash tools/make_training_data.sh .device/data5 5 {build}"]),
] + [
    (f"data{r}", "data", [f"bash tools/make_training_data.sh .device/data{r} {r} {{build}}",
                          f"cp {DAGGER} .device/data{r}/embodied_dagger.jsonl.gz",
                          f"cp {DAGGER} .device/data{r}/embodied_dagger2.jsonl.gz"])
    for r in (6, 7, 8)
] + [
    # from round 9 on the script writes the drills and the DAgger lines; the second copy of the
    # DAgger lines is added as the device commands did
    (f"data{r}", "data", [f"bash tools/make_training_data.sh .device/data{r} {r} {{build}}",
                          f"cp {DAGGER} .device/data{r}/embodied_dagger2.jsonl.gz"])
    for r in (9, 10, 11, 12, 13, 14)
] + [
    ("stage1", "train", dict(stage="1", minutes=6.3)),
    ("stage2", "train", dict(stage="2", init="stage1", minutes=6.0)),
    ("r3", "train", dict(init="stage2", data="data3", seed=3, minutes=6.8)),
    ("r4a", "train", dict(init="r3", data="data4a", seed=41, minutes=2.4)),
    ("r4b", "train", dict(init="r4a", data="data4b", seed=4, minutes=5.6)),
    ("r5", "train", dict(init="r4b", data="data5", seed=5, lr="7e-4", minutes=3.7)),
    ("r6", "train", dict(init="r5", data="data6", seed=6, extra="--compile", minutes=6.9)),
    ("r7", "train", dict(init="r6", data="data6", seed=7, minutes=7.2)),
    ("r8", "train", dict(init="r7", data="data7", seed=8, minutes=7.2)),
    ("r9", "train", dict(init="r8", data="data8", seed=9, minutes=4.4)),
    # the lookup curriculum (bench/results/2026-11-24-h100-engram-tiny-induction/)
    ("drill", "drill", dict(init="r9", seconds=80)),
    ("c6", "train", dict(init="drill", data="data9", seed=13, extra="--induction-drill 40000",
                         minutes=5.2)),
    ("c7", "train", dict(init="c6", data="data10", seed=14, extra="--induction-drill 30000",
                         minutes=6.7)),
    ("c8", "train", dict(init="c7", data="data11", seed=15, extra="--induction-drill 30000",
                         minutes=4.0)),
    # recovery with model soups (bench/results/2026-11-24-h100-engram-tiny-soup/)
    ("soup12", "soup", dict(init="c8", data="data12", seeds=(18, 19, 20), minutes=6.3)),
    ("soup13", "soup", dict(init="soup12", data="data13", seeds=(21, 22, 23), minutes=7.0)),
    ("soup14", "soup", dict(init="soup13", data="data14", seeds=(24, 25, 26), minutes=7.0)),
    ("soup15", "soup", dict(init="soup14", data="data9", seeds=(27, 28, 29), lr="5e-4",
                            minutes=7.0)),
]
FINAL = "soup15"
STAGE_DATA = {"1": "data1", "2": "data2"}  # read by train_on_device.sh stages 1 and 2


def check_plan(steps):
    """Every model a step starts from and every data folder it reads was made by an earlier
    step; names are unique; the last step is the shipped one. Returns a list of problems."""
    problems, made = [], set()
    for name, kind, spec in steps:
        if name in made:
            problems.append(f"{name}: made twice")
        if kind in ("train", "drill", "soup"):
            init = spec.get("init")
            if init is None and not (kind == "train" and spec.get("stage") == "1"):
                problems.append(f"{name}: starts from nothing")
            if init is not None and init not in made:
                problems.append(f"{name}: starts from {init}, not made before it")
            data = spec.get("data") or STAGE_DATA.get(spec.get("stage", ""))
            if kind != "drill" and data not in made:
                problems.append(f"{name}: reads {data}, not made before it")
            if kind != "drill" and not spec.get("minutes"):
                problems.append(f"{name}: no time budget")
        made.add(name)
    if steps[-1][0] != FINAL:
        problems.append(f"the last step is {steps[-1][0]}, not {FINAL}")
    return problems


def model_dir(work, name):
    """Where a step's model is: soups keep their mean at m-soup (tools/train_side_by_side.sh)."""
    kinds = {n: k for n, k, _ in STEPS}
    return os.path.join(work, name, "m-soup") if kinds[name] == "soup" else os.path.join(work, name)


def commands(name, kind, spec, work, cli, build):
    """The shell lines of one step (also what --dry-run prints)."""
    if kind == "data":
        return [line.format(cli=cli, build=build) for line in spec]
    out = os.path.join(work, name)
    if kind == "drill":
        return [f"python3 tools/induction_check.py --init {model_dir(work, spec['init'])} "
                f"--seconds {spec['seconds']} --out {out}"]
    if kind == "train":
        env = [f"OUT={out}"]
        if "init" in spec:
            env.append(f"INIT={model_dir(work, spec['init'])}")
        stage = spec.get("stage", "continue")
        if stage == "continue":
            env += [f"DATA=.device/{spec['data']}", f"SEED={spec['seed']}", f"LR={spec.get('lr', '1e-3')}"]
        if spec.get("extra"):
            env.append(f"EXTRA='{spec['extra']}'")
        return [" ".join(env) + f" bash tools/train_on_device.sh {stage} {spec['minutes']}"]
    runs = " ".join(f"v{i + 1} '{model_dir(work, spec['init'])}|{s}|{spec.get('lr', '1e-3')}|"
                    f"--induction-drill 30000'" for i, s in enumerate(spec["seeds"]))
    return [f"mkdir -p {out}",
            f"OUT={out} WORK={out} SOUP='v1 v2 v3' bash tools/train_side_by_side.sh "
            f".device/{spec['data']} {spec['minutes']} {runs}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan's commands and stop")
    ap.add_argument("--from", dest="start", default=STEPS[0][0], help="first step to run")
    ap.add_argument("--work", default="/tmp/engram-tiny-chain", help="where models go")
    ap.add_argument("--build", default="build", help="the build folder of engram-cli")
    ap.add_argument("--minutes-scale", type=float, default=1.0,
                    help="scale every training budget (a quick check of the plumbing; the "
                         "recipe is 1.0)")
    args = ap.parse_args()
    problems = check_plan(STEPS)
    if problems:
        sys.exit("train_engram_tiny_chain: the plan is broken: " + "; ".join(problems))
    names = [n for n, _, _ in STEPS]
    if args.start not in names:
        sys.exit(f"train_engram_tiny_chain: no step {args.start} (steps: {', '.join(names)})")
    cli = os.path.join(args.build, "app", "cli", "engram-cli")
    todo = STEPS[names.index(args.start):]
    if not args.dry_run and any(k == "data" for _, k, _ in todo) and not os.access(cli, os.X_OK):
        sys.exit(f"train_engram_tiny_chain: no engram-cli at {cli} (--build)")
    for name, kind, spec in todo:
        if "minutes" in spec:
            spec = dict(spec, minutes=round(spec["minutes"] * args.minutes_scale, 2))
        print(f"== {name}", flush=True)
        for line in commands(name, kind, spec, args.work, cli, args.build):
            print(line, flush=True)
            if not args.dry_run:
                subprocess.run(line, shell=True, check=True, executable="/bin/bash")
    if not args.dry_run:
        # the chat template is written by hand, not by the trainer (model README, "Chat format")
        final = model_dir(args.work, FINAL)
        shutil.copy(os.path.join("resources", "models", "engram-tiny", "tokenizer_config.json"),
                    final)
        print(f"done: {final} (install: cp {final}/* resources/models/engram-tiny/)")


if __name__ == "__main__":
    main()
