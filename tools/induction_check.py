#!/usr/bin/env python3
"""How fast a model learns to copy: trains on random pieces written twice (BOS + r + r) with the
loss on the repeat only, and prints that loss as it goes. The length of r differs from row to row
(--min-length .. --length), so that attending to a fixed offset does not solve it (with one
length, round 9 learned that offset in 200 steps and still could not copy in the trainer): only
attention by content (an induction head) gets the loss near 0; without it, it stays at
ln(vocabulary).
Used to tell "engram-tiny's weights are stuck" from "the training stack cannot learn lookups".
GPU machine (PyTorch, transformers):

    python3 tools/induction_check.py --init resources/models/engram-tiny --seconds 60
    python3 tools/induction_check.py --layers 10 --seconds 60 [--heads 5 --kv-heads 1]
        [--rope-theta 500000] [--attn eager]

Prints one JSON line per 50 steps and a summary line.
"""
import argparse
import json
import os
import shutil
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", default="", help="a model folder to start from (else a fresh model)")
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=320)
    ap.add_argument("--heads", type=int, default=10)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--length", type=int, default=256, help="most pieces before the repeat")
    ap.add_argument("--min-length", type=int, default=32)
    ap.add_argument("--rope-theta", type=float, default=0, help="override the RoPE base")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="", help="save the trained model here (with --init's "
                    "tokenizer.model): the first phase of a curriculum")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    if args.init:
        cfg = transformers.AutoConfig.from_pretrained(args.init)
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 27 // 10,
            num_hidden_layers=args.layers, num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
            max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=1,
            eos_token_id=2)
    if args.rope_theta:
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": args.rope_theta}
    if args.init:
        model = transformers.LlamaForCausalLM.from_pretrained(args.init, config=cfg,
                                                              dtype=torch.float32)
    else:
        model = transformers.LlamaForCausalLM(cfg)
    model.config._attn_implementation = args.attn
    model = model.cuda().train()
    vocab = model.config.vocab_size
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    start, step, loss = time.time(), 0, None
    while time.time() - start < args.seconds:
        n = args.length
        ids = torch.randint(259, vocab, (args.batch, 2 * n + 1), device="cuda")
        ids[:, 0] = 1
        lengths = torch.randint(args.min_length, n + 1, (args.batch, 1), device="cuda")
        pos = torch.arange(2 * n + 1, device="cuda").unsqueeze(0)
        repeat = (pos > lengths) & (pos <= 2 * lengths)
        ids = torch.where(repeat, ids.gather(1, (pos - lengths).clamp(min=0)), ids)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits
        # the loss on the repeat's pieces 2..L (the first is unpredictable); row j predicts j+1
        target = repeat & (pos > lengths + 1)
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, vocab),
                                               ids[:, 1:].reshape(-1), reduction="none")
        w = target[:, 1:].reshape(-1).float()
        loss = (ce * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(json.dumps({"step": step, "seconds": round(time.time() - start, 1),
                              "repeat_loss": round(float(loss), 4)}), flush=True)
        step += 1
    print(json.dumps({"init": args.init or "fresh", "layers": model.config.num_hidden_layers,
                      "heads": model.config.num_attention_heads,
                      "kv_heads": model.config.num_key_value_heads,
                      "rope": model.config.rope_parameters,
                      "attn": args.attn, "steps": step, "final_repeat_loss": round(float(loss), 4),
                      "uniform_loss": round(float(torch.log(torch.tensor(vocab - 259.0))), 4)}),
          flush=True)
    if args.out:
        model.save_pretrained(args.out, max_shard_size="15MB")
        if args.init:
            shutil.copy(os.path.join(args.init, "tokenizer.model"), args.out)


if __name__ == "__main__":
    main()
