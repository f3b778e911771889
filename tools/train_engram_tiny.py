#!/usr/bin/env python3
"""Trains Engram's bundled default model, engram-tiny, from data exported by engram-cli.

One reproducible command on the GPU machine (PyTorch, transformers, sentencepiece):

    python3 tools/train_engram_tiny.py --data DATA_DIR --out OUT_DIR --seed 1 --minutes 6

DATA_DIR holds JSON-lines files (optionally gzipped) written by `engram-cli export embodied|conversation`; each line
has `prompt` and `target` (and `kind`). Steps:
  1. a SentencePiece BPE tokenizer (byte fallback, identity normalisation) trained on the
     prompts, targets and the chat-template text;
  2. a Llama-architecture model (GQA, tied embeddings, 4,096 positions) trained on
     BOS + encode(prompt) + encode(target) + EOS with the loss on the target and EOS only —
     exactly the ids the engine feeds at inference (engram-cli eval encodes the same way).
     QA records of one conversation share their history: they are packed into one sequence,
     BOS + encode(history + suffix_1) + encode(answer_1) + EOS + encode(suffix_2) +
     encode(answer_2) + EOS + ..., with the loss on every answer and EOS. The first question
     sees exactly the inference ids; the history is computed once for ~15 answers instead of
     once per answer (a 15x saving on the longest sequences of the corpus);
  3. saved as an ordinary Hugging Face folder (config.json, bf16 safetensors in shards of at
     most 15 MB, tokenizer.model, generation_config.json) plus train_log.json.
"""
import argparse
import glob
import gzip
import json
import lzma
import math
import os
import random
import shutil
import time

import torch
import sentencepiece as spm
import transformers

QUESTION_MARK = "\nQuestion: "  # where a QA prompt's history ends
TEMPLATE_TEXT = ["### System:\n", "### User:\n", "### Assistant:\n", "\n\n"]


def read_examples(data_dir):
    """Returns (examples, groups): examples are (prompt, target, kind); groups map a QA history
    to its [(suffix, answer)], from plain QA records (split at the question) or from records
    grouped by tools/pack_qa_records.py."""
    examples, groups = [], {}
    paths = []
    for pattern in ("*.jsonl", "*.jsonl.gz", "*.jsonl.xz"):
        paths += glob.glob(os.path.join(data_dir, pattern))
    for path in sorted(paths):
        opener = gzip.open if path.endswith(".gz") else lzma.open if path.endswith(".xz") else open
        with opener(path, "rt") as f:
            for line in f:
                if not line.strip():
                    continue
                ex = json.loads(line)
                # Lines without a kind take it from the file name: embodied.jsonl.gz and
                # embodied_dagger.jsonl.gz are both "embodied".
                kind = ex.get("kind") or os.path.basename(path).split(".")[0].split("_")[0]
                if kind == "qa" and "history" in ex:
                    groups.setdefault(ex["history"], []).extend(tuple(q) for q in ex["qa"])
                elif kind == "qa":
                    cut = ex["prompt"].rfind(QUESTION_MARK)
                    groups.setdefault(ex["prompt"][:cut], []).append(
                        (ex["prompt"][cut:], ex["target"]))
                else:
                    examples.append((ex["prompt"], ex["target"], kind))
    return examples, groups


def train_tokenizer(examples, groups, out_dir, vocab, seed):
    corpus = os.path.join(out_dir, "tokenizer_corpus.txt")
    rng = random.Random(seed)
    # One record per QA history: the questions of a conversation share it.
    distinct = list(examples) + [(h + qa[0][0], qa[0][1], "qa") for h, qa in groups.items() if qa]
    sample = distinct if len(distinct) < 20000 else rng.sample(distinct, 20000)
    with open(corpus, "w") as f:
        # Natural lines: SentencePiece skips lines past max_sentence_length (4,192 bytes).
        for p, t, _ in sample:
            f.write(p + "\n" + t + "\n")
        for t in TEMPLATE_TEXT:
            f.write(t.strip() + "\n")
    prefix = os.path.join(out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=vocab, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", split_digits=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0,
        input_sentence_size=2000000, shuffle_input_sentence=True, seed_sentencepiece_size=200000,
        num_threads=16, minloglevel=2)
    os.remove(corpus)
    os.rename(prefix + ".model", os.path.join(out_dir, "tokenizer.model"))
    os.remove(prefix + ".vocab")
    return spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model"))


def encode_examples(sp, examples, groups, max_len, seed):
    """Returns [(ids, loss_mask, kind)] and the count dropped for length. QA groups are packed
    (module docstring): the history is encoded with the first question of each sequence."""
    prompts = sp.encode([p for p, _, _ in examples], num_threads=16)
    targets = sp.encode([t for _, t, _ in examples], num_threads=16)
    out = []
    dropped = 0
    for (p, t, kind), pi, ti in zip(examples, prompts, targets):
        ids = [sp.bos_id()] + pi + ti + [sp.eos_id()]
        if len(ids) > max_len:
            dropped += 1
            continue
        out.append((ids, [0] * (1 + len(pi)) + [1] * (len(ti) + 1), kind))

    order_rng = random.Random(seed)
    histories = list(groups.keys())
    for h in histories:
        # Every question type must also come straight after the history, as at inference.
        order_rng.shuffle(groups[h])
    firsts = sp.encode([h + groups[h][0][0] for h in histories], num_threads=16)
    answers = sorted({a for qa in groups.values() for _, a in qa})
    answer_ids = dict(zip(answers, sp.encode(answers, num_threads=16)))
    # Later questions of a sequence: the suffix alone, without SentencePiece's dummy-prefix
    # piece (in the inference prompt the suffix continues the history's text).
    suffixes = sorted({suffix for qa in groups.values() for suffix, _ in qa})
    dummy = sp.piece_to_id("\u2581")
    suffix_ids = {}
    for suffix, si in zip(suffixes, sp.encode(suffixes, num_threads=16)):
        suffix_ids[suffix] = si[1:] if si and si[0] == dummy else si
    # A history whose questions overflow one sequence restarts with encode(history + suffix).
    # Each history's packing is a coroutine that yields the text it needs encoded; the driver
    # encodes the requests of all histories in one threaded batch per wave (one call per restart
    # took ~half of the data time on the GPU machine), with the same result.
    bos, eos = sp.bos_id(), sp.eos_id()

    def pack(h, first):
        packs, lost = [], 0
        ids, mask = [], []
        for k, (suffix, answer) in enumerate(groups[h]):
            ti = answer_ids[answer]
            if ids and len(ids) + len(suffix_ids[suffix]) + len(ti) + 1 > max_len:
                packs.append((ids, mask, "qa"))
                ids, mask = [], []
            if not ids:
                pi = first if k == 0 else (yield h + suffix)
                ids, mask = [bos] + pi, [0] * (1 + len(pi))
            else:
                si = suffix_ids[suffix]
                ids += si
                mask += [0] * len(si)
            if len(ids) + len(ti) + 1 > max_len:
                lost += 1
                ids, mask = [], []
                continue
            ids += ti + [eos]
            mask += [1] * (len(ti) + 1)
        if ids:
            packs.append((ids, mask, "qa"))
        return packs, lost

    packed = [None] * len(histories)
    requests = [(i, pack(h, first), None) for i, (h, first) in enumerate(zip(histories, firsts))]
    while requests:
        texts = [r[2] for r in requests if r[2] is not None]
        answers_iter = iter(sp.encode(texts, num_threads=16) if texts else [])
        waiting = []
        for i, gen, text in requests:
            try:
                waiting.append((i, gen, gen.send(None if text is None else next(answers_iter))))
            except StopIteration as done:
                packed[i] = done.value
        requests = waiting
    for packs, lost in packed:
        out.extend(packs)
        dropped += lost
    return out, dropped


def induction_drill(sp, count, seed):
    """Sequences of random pieces, each written twice: BOS + r + r + EOS with the loss on the
    repeat, which only copying by content can predict. The canonical way to grow induction heads;
    round 9 had none (tools/probe_lookup.py), and lookups of a fact by its key need them."""
    rng = random.Random(seed)
    first = 3 + 256  # after <unk>, <s>, </s> and the byte-fallback pieces
    out = []
    for _ in range(count):
        r = [rng.randrange(first, sp.get_piece_size()) for _ in range(rng.randint(24, 400))]
        out.append(([sp.bos_id()] + r + r + [sp.eos_id()], [0] * (1 + len(r)) + [1] * (len(r) + 1),
                    "induction"))
    return out


def batches(encoded, tokens_per_batch, rng):
    """Length-bucketed batches of about tokens_per_batch tokens (padding included)."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    out = []
    i = 0
    while i < len(order):
        longest = len(encoded[order[min(len(order) - 1, i)]][0])
        j = i
        while j < len(order) and (j - i + 1) * max(longest, len(encoded[order[j]][0])) <= tokens_per_batch:
            longest = max(longest, len(encoded[order[j]][0]))
            j += 1
        j = max(j, i + 1)
        out.append(order[i:j])
        i = j
    rng.shuffle(out)
    return out


def drill_first(encoded, tokens_per_batch, steps, share, rng):
    """One epoch's batches, with the induction drill batched apart from the rest so that about
    `share` of the first `steps` batches are drill; after those, the remaining batches of both
    in shuffled order. Mixed in at the drill's natural share a model without induction stays at
    chance; 80 s of pure drill grows it but wipes the output priors (model README). This was the
    middle way: a concentrated drill while the round's data keep flowing. Measured on the H100
    (bench/results/2026-11-24-h100-engram-tiny-soup/, call 1): 1,100-1,300 steps at a share of
    0.65-0.8 stayed at chance too; kept for experiments, not used by the recipe."""
    drill_idx = [i for i, e in enumerate(encoded) if e[2] == "induction"]
    rest_idx = [i for i, e in enumerate(encoded) if e[2] != "induction"]
    def apart(idx):
        return [[idx[j] for j in b] for b in batches([encoded[i] for i in idx], tokens_per_batch, rng)]
    drill, rest = apart(drill_idx), apart(rest_idx)
    out = []
    while len(out) < steps and (drill or rest):
        take_drill = drill and (not rest or rng.random() < share)
        out.append(drill.pop() if take_drill else rest.pop())
    tail = drill + rest
    rng.shuffle(tail)
    return out + tail


def collate(encoded, idx, device, prompt_weight=None):
    """Right padding and no attention mask: with a causal mask no real token sees a pad, and
    SDPA keeps its flash kernel (a padding mask would force the slower masked path). Returns the
    ids, the labels (-100 off the targets) and the loss weight of every position: 1 on targets,
    prompt_weight[kind] on prompt tokens (language modelling on the history teaches the copy from
    context that answers and actions need), 0 on padding and BOS."""
    prompt_weight = prompt_weight or {}
    length = max(len(encoded[i][0]) for i in idx)
    ids = torch.zeros((len(idx), length), dtype=torch.long)
    labels = torch.full((len(idx), length), -100, dtype=torch.long)
    weights = torch.zeros((len(idx), length), dtype=torch.float32)
    for r, i in enumerate(idx):
        seq, mask, kind = encoded[i]
        seq_t = torch.tensor(seq)
        ids[r, :len(seq)] = seq_t
        # labels are shifted inside the model: label[j] is predicted at position j-1
        keep = torch.tensor(mask, dtype=torch.bool)
        labels[r, :len(seq)] = torch.where(keep, seq_t, torch.full_like(seq_t, -100))
        weights[r, :len(seq)] = torch.where(keep, torch.tensor(1.0),
                                            torch.tensor(float(prompt_weight.get(kind, 0.0))))
        weights[r, 0] = 0.0
    return (ids.to(device, non_blocking=True), labels.to(device, non_blocking=True),
            weights.to(device, non_blocking=True))


def weighted_loss(logits, ids, weights):
    """Cross entropy of every next token, weighted (collate), normalised by the total weight."""
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
        reduction="none")
    w = weights[:, 1:].reshape(-1)
    return (ce * w).sum() / w.sum().clamp_min(1e-6)


def target_spans(mask):
    """[start, end) of each run of target positions (an answer or action and its EOS)."""
    spans, start = [], None
    for j, m in enumerate(mask + [0]):
        if m and start is None:
            start = j
        elif not m and start is not None:
            spans.append((start, j))
            start = None
    return spans


def validation_metrics(model, val, tokens_per_batch, device):
    """Per kind: mean loss per target token, and the share of targets (answers, actions, replies
    with their EOS) whose every token is the argmax under teacher forcing: the exact match of
    greedy decoding for the first target of a sequence, the expert agreement for an action."""
    sums, counts, exact, spans_seen = {}, {}, {}, {}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for b in batches(val, tokens_per_batch, random.Random(0)):
            ids, labels, _ = collate(val, b, device)
            logits = model(input_ids=ids).logits.float()
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                ignore_index=-100, reduction="none").view(len(b), -1)
            hit = (logits[:, :-1].argmax(-1) == ids[:, 1:]).cpu()
            for r, i in enumerate(b):
                kind = val[i][2]
                n = int((labels[r, 1:] != -100).sum())
                sums[kind] = sums.get(kind, 0.0) + float(loss[r].sum())
                counts[kind] = counts.get(kind, 0) + n
                for start, end in target_spans(val[i][1]):
                    exact[kind] = exact.get(kind, 0) + int(hit[r, start - 1:end - 1].all())
                    spans_seen[kind] = spans_seen.get(kind, 0) + 1
    per_kind = {k: sums[k] / max(1, counts[k]) for k in sums}
    overall = sum(sums.values()) / max(1, sum(counts.values()))
    exact_by_kind = {k: exact[k] / spans_seen[k] for k in spans_seen}
    return overall, per_kind, exact_by_kind


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=320)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--heads", type=int, default=10)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=864)
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--tokens-per-batch", type=int, default=65536)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--init", default="", help="start from this earlier run's folder")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--prompt-weight", type=float, default=0.0,
                    help="loss weight of the history tokens of QA and chat records (targets weigh 1)")
    ap.add_argument("--embodied-prompt-weight", type=float, default=0.0,
                    help="loss weight of embodied prompt tokens (memory, task, action history)")
    ap.add_argument("--induction-drill", type=int, default=0,
                    help="add this many random-piece sequences written twice (induction_drill). "
                         "Mixed in from a model without induction it stays at chance (the "
                         "phase change needs ~800 steps of concentrated drill: "
                         "tools/induction_check.py --out first); it keeps a grown one")
    ap.add_argument("--drill-first-steps", type=int, default=0,
                    help="for this many first steps, draw induction-drill batches at "
                         "--drill-share (drill_first); needs --induction-drill. At 1,100-1,300 "
                         "steps and 0.65-0.8 the drill stayed at chance (not in the recipe)")
    ap.add_argument("--drill-share", type=float, default=0.5)
    ap.add_argument("--limit", type=int, default=0, help="use only this many examples (smoke test)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model, with an eager fallback. Measured on the H100 "
                         "(round 6): ~150 s to compile, recompiles later, and no steady-state gain "
                         "over eager (~400k tokens/s both); kept to reproduce round 6, off otherwise")
    args = ap.parse_args()
    t_start = time.time()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    device = "cuda"

    examples, groups = read_examples(args.data)
    if args.limit:
        examples = random.Random(args.seed).sample(examples, min(args.limit, len(examples)))
        groups = dict(list(groups.items())[:max(1, args.limit // 20)])
    if args.init:
        # Warm start: the tokenizer and weights of an earlier run (same vocabulary).
        shutil.copy(os.path.join(args.init, "tokenizer.model"), args.out)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(args.out, "tokenizer.model"))
    else:
        sp = train_tokenizer(examples, groups, args.out, args.vocab, args.seed)
    encoded, dropped = encode_examples(sp, examples, groups, args.max_len, args.seed)
    encoded += induction_drill(sp, args.induction_drill, args.seed)
    rng = random.Random(args.seed)
    rng.shuffle(encoded)
    n_val = min(300, len(encoded) // 20)
    val, train = encoded[:n_val], encoded[n_val:]
    t_data = time.time()

    cfg = transformers.LlamaConfig(
        vocab_size=sp.get_piece_size(), hidden_size=args.hidden,
        intermediate_size=args.intermediate, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, max_position_embeddings=4096, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
        attention_bias=False, mlp_bias=False, initializer_range=0.02)
    cfg._attn_implementation = "sdpa"
    if args.init:
        model = transformers.LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32)
        model.config._attn_implementation = "sdpa"
        model = model.to(device)
    else:
        model = transformers.LlamaForCausalLM(cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    # Exercise validation and saving now, so that a fault shows in seconds, not after the run.
    # A warm start measures where it starts from on the same validation records.
    before = validation_metrics(model, val if args.init else val[:8], args.tokens_per_batch, device)
    if args.init:
        print(json.dumps({"validation_before": {"loss": before[0], "loss_by_kind": before[1],
                                                "target_exact_by_kind": before[2]}}), flush=True)
    model.save_pretrained(os.path.join(args.out, "_check"), max_shard_size="15MB")
    for f in os.listdir(os.path.join(args.out, "_check")):
        os.remove(os.path.join(args.out, "_check", f))
    os.rmdir(os.path.join(args.out, "_check"))
    model.train()
    print(json.dumps({"examples": len(encoded), "dropped": dropped, "parameters": params,
                      "data_seconds": round(time.time() - t_start, 1)}), flush=True)
    budget = args.minutes * 60
    prompt_weight = {"qa": args.prompt_weight, "chat": args.prompt_weight,
                     "embodied": args.embodied_prompt_weight}
    warmup = args.warmup
    forward = torch.compile(model, dynamic=True) if args.compile else model

    def train_loss(ids, weights):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return weighted_loss(forward(input_ids=ids).logits, ids, weights)

    log = []
    step = 0
    seen_tokens = 0
    train_start = time.time()
    epoch = 0
    done = False
    while not done:
        if epoch == 0 and args.drill_first_steps:
            epoch_batches = drill_first(train, args.tokens_per_batch, args.drill_first_steps,
                                        args.drill_share, rng)
        else:
            epoch_batches = batches(train, args.tokens_per_batch, rng)
        for idx in epoch_batches:
            elapsed = time.time() - train_start
            if elapsed > budget:
                done = True
                break
            frac = elapsed / budget
            lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr
            ids, _, weights = collate(train, idx, device, prompt_weight)
            opt.zero_grad(set_to_none=True)
            try:
                loss = train_loss(ids, weights)
                loss.backward()
            except Exception as e:  # a compiler fault must not cost the device call
                if forward is model:
                    raise
                print(json.dumps({"compile_failed": repr(e)[:2000]}), flush=True)
                forward = model
                opt.zero_grad(set_to_none=True)
                loss = train_loss(ids, weights)
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            seen_tokens += sum(len(train[i][0]) for i in idx)
            if step % 100 == 0:
                seconds = time.time() - train_start
                log.append({"step": step, "epoch": epoch, "loss": float(loss), "lr": lr,
                            "seconds": round(seconds, 1), "tokens": seen_tokens,
                            "tokens_per_second": round(seen_tokens / max(seconds, 1e-9))})
                print(json.dumps(log[-1]), flush=True)
            step += 1
        epoch += 1

    model.eval()
    val_loss, val_loss_by_kind, val_exact_by_kind = validation_metrics(
        model, val, args.tokens_per_batch, device)
    model.to(torch.bfloat16).save_pretrained(args.out, max_shard_size="15MB")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f, indent=2)
    kinds = {}
    for _, _, k in encoded:
        kinds[k] = kinds.get(k, 0) + 1
    info = {"command": "python3 tools/train_engram_tiny.py " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
            "seed": args.seed, "parameters": params, "examples": len(encoded),
            "examples_by_kind": kinds, "dropped_over_max_len": dropped,
            "steps": step, "epochs": epoch, "train_tokens": seen_tokens,
            "validation_loss": val_loss, "validation_loss_by_kind": val_loss_by_kind,
            "validation_target_exact_by_kind": val_exact_by_kind,
            "validation_before": ({"loss": before[0], "loss_by_kind": before[1],
                                   "target_exact_by_kind": before[2]} if args.init else None), "data_seconds": round(t_data - t_start, 1),
            "train_seconds": round(time.time() - train_start, 1),
            "wall_seconds": round(time.time() - t_start, 1),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "transformers": transformers.__version__, "log": log}
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k != "log"}))


if __name__ == "__main__":
    main()
