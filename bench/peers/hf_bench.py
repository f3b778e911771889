#!/usr/bin/env python3
"""Hugging Face transformers peer for `engram-cli bench`: the same named shape with random
weights, bf16, SDPA attention, batch 1. Prefill of N tokens; decode of D tokens after an
N-token prompt with the model's own KV cache (one token per forward, greedy). Also the peak of
the CUDA caching allocator's allocated bytes over a run (weights included, as `engram-cli bench`
reports its peaks): the transformers full-KV peak beside Engram's.

    python3 bench/peers/hf_bench.py --shape qwen2.5-7b --tokens 4096 --decode-tokens 256 --json out.json
"""
import argparse
import json
import statistics
import time

import torch
import transformers


def llama3(hidden, inter, layers, heads, tied, positions):
    """Llama 3's vocabulary, 8 KV heads, RoPE theta 500K (as core/model/model_config.cpp)."""
    return ("LlamaConfig", dict(hidden_size=hidden, intermediate_size=inter,
                                num_hidden_layers=layers, num_attention_heads=heads,
                                num_key_value_heads=8, vocab_size=128256,
                                tie_word_embeddings=tied, rope_theta=500000.0,
                                max_position_embeddings=positions, rms_norm_eps=1e-5))


SHAPES = {
    "qwen2.5-0.5b": ("Qwen2Config", dict(hidden_size=896, intermediate_size=4864,
                     num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                     vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                     max_position_embeddings=32768, rms_norm_eps=1e-6)),
    "qwen2.5-7b": ("Qwen2Config", dict(hidden_size=3584, intermediate_size=18944,
                   num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                   vocab_size=152064, tie_word_embeddings=False, rope_theta=1e6,
                   max_position_embeddings=32768, rms_norm_eps=1e-6)),
    "qwen2.5-14b": ("Qwen2Config", dict(hidden_size=5120, intermediate_size=13824,
                    num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
                    vocab_size=152064, tie_word_embeddings=False, rope_theta=1e6,
                    max_position_embeddings=32768, rms_norm_eps=1e-5)),
    "llama3-8b": llama3(4096, 14336, 32, 32, tied=False, positions=8192),
    "llama3.1-8b": llama3(4096, 14336, 32, 32, tied=False, positions=131072),
    "llama3.2-3b": llama3(3072, 8192, 28, 24, tied=True, positions=131072),
}


def sync():
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen2.5-7b")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--decode-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    cls, fields = SHAPES[args.shape]
    cfg = getattr(transformers, cls)(**fields)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                              attn_implementation="sdpa")
    model.eval()
    ids = torch.randint(3, cfg.vocab_size, (1, args.tokens), device="cuda")

    prefill = []
    decode = []
    peaks = []
    weights = torch.cuda.memory_allocated()
    with torch.inference_mode():
        for run in range(-1, args.repeat):
            sync()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            out = model(ids, use_cache=True, logits_to_keep=1)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            t1 = time.perf_counter()
            pkv = out.past_key_values
            for _ in range(args.decode_tokens - 1):
                out = model(nxt, past_key_values=pkv, use_cache=True)
                pkv = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            int(nxt.item())
            t2 = time.perf_counter()
            if run >= 0:
                prefill.append(args.tokens / (t1 - t0))
                decode.append((args.decode_tokens - 1) / (t2 - t1))
                peaks.append(torch.cuda.max_memory_allocated())
            del out, pkv
            torch.cuda.empty_cache()
    res = {
        "benchmark": "transformers",
        "shape": args.shape,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": "bf16",
        "attention": "sdpa",
        "prompt_tokens": args.tokens,
        "decode_tokens": args.decode_tokens,
        "prefill_tokens_per_s_runs": prefill,
        "prefill_tokens_per_s": statistics.median(prefill),
        "decode_tokens_per_s_runs": decode,
        "decode_tokens_per_s": statistics.median(decode),
        "decode_ms_per_token": 1000.0 / statistics.median(decode),
        "weights_bytes": weights,
        "peak_allocated_bytes_runs": peaks,
        "peak_allocated_bytes": max(peaks),
    }
    print(json.dumps(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
