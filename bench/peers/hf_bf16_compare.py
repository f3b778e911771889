#!/usr/bin/env python3
"""bf16 on the GPU: Engram against transformers on the fixture checkpoints and on a random
Qwen2.5-0.5B-shaped checkpoint written here. For each model: the max |logit difference| over
a sequence (relative to the logit scale) and the greedy agreement over 32 tokens (the fraction
of positions where Engram's greedy continuation equals transformers' before they first differ,
and overall).

    python3 bench/peers/hf_bf16_compare.py --cli build/app/cli/engram-cli --data tests/data --json out.json
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
import torch
import transformers

FIXTURES = ["llama-gqa", "qwen2-bias-tied", "qwen3-qknorm", "llama3-rope-scaling", "mistral"]


def engram_logits(cli, model_dir, ids, out):
    subprocess.run([cli, "logits", "--model", model_dir, "--ids", ",".join(map(str, ids)),
                    "--device", "cuda", "--dtype", "bf16", "--out", out], check=True,
                   capture_output=True)
    return np.load(out)


def engram_greedy(cli, model_dir, ids, n):
    r = subprocess.run([cli, "generate", "--model", model_dir, "--ids", ",".join(map(str, ids)),
                        "--max-tokens", str(n), "--ignore-eos", "--device", "cuda",
                        "--dtype", "bf16"], check=True, capture_output=True, text=True)
    return [int(t) for t in r.stdout.strip().split(",") if t]


def hf_greedy(model, ids, n):
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids], device="cuda"), max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def compare(cli, model_dir, ids, n_greedy):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    with torch.inference_mode():
        ref = model(torch.tensor([ids], device="cuda")).logits[0].float().cpu().numpy()
    with tempfile.TemporaryDirectory() as tmp:
        ours = engram_logits(cli, model_dir, ids, os.path.join(tmp, "l.npy"))
    scale = float(np.abs(ref).max())
    err = float(np.abs(ours - ref).max())
    top1 = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    prompt = ids[:8]
    a = engram_greedy(cli, model_dir, prompt, n_greedy)
    b = hf_greedy(model, prompt, n_greedy)
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    agree = sum(int(x == y) for x, y in zip(a, b)) / max(1, n_greedy)
    del model
    torch.cuda.empty_cache()
    return {"max_abs_error": err, "logit_scale": scale, "relative_error": err / scale,
            "top1_agreement": top1, "greedy_tokens": n_greedy,
            "greedy_identical_prefix": prefix, "greedy_agreement": agree}


def write_qwen_random(path):
    cfg = transformers.Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2,
                                   vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                                   max_position_embeddings=32768, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--json")
    # Engram turns cuDNN's attention off (core/runtime/decoder.cpp: a plan per new length pair);
    # transformers' SDPA picks it on an H100 for some shapes (head_dim 64), whose arithmetic
    # differs from FlashAttention's. This flag makes transformers use the same kernels.
    ap.add_argument("--no-cudnn-sdp", action="store_true")
    args = ap.parse_args()
    if args.no_cudnn_sdp:
        torch.backends.cuda.enable_cudnn_sdp(False)
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "transformers": transformers.__version__, "dtype": "bf16",
               "cudnn_sdp": not args.no_cudnn_sdp, "models": {}}
    for name in FIXTURES:
        ref = json.load(open(os.path.join(args.data, "reference", name, "reference.json")))
        results["models"][name] = compare(args.cli, os.path.join(args.data, "models", name),
                                          ref["sequences"][0]["ids"], 32)
        print(name, results["models"][name], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_qwen_random(tmp)
        rng = np.random.default_rng(0)
        ids = [151643] + [int(t) for t in rng.integers(0, 150000, 255)]
        results["models"]["qwen2.5-0.5b-random"] = compare(args.cli, tmp, ids, 32)
        print("qwen2.5-0.5b-random", results["models"]["qwen2.5-0.5b-random"], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
