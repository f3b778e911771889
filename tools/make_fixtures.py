#!/usr/bin/env python3
"""Writes tiny random-weight Hugging Face checkpoints and the reference logits of
transformers for them (tests/data/models, tests/data/reference).

Run on a machine with PyTorch and transformers (the GPU machine has both):
    python3 tools/make_fixtures.py --out tests/data [--tokenizer PATH]

Each checkpoint is an ordinary Hugging Face folder written by hand (config.json in the
classic or the transformers-5 dialect, safetensors in the stored dtype, sharded for one of
them) and then loaded back with AutoModelForCausalLM, so the reference is what transformers
itself makes of the folder. Weights are rounded to the stored dtype before the f32
reference runs, so an f32 runtime that loads the file exactly must reproduce it.
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import save_file

SEED = 20261123

# name -> (architecture, config fields, storage dtype, dialect, shards)
FIXTURES = {
    "llama-gqa": ("LlamaForCausalLM", dict(
        model_type="llama", vocab_size=32000, hidden_size=64, intermediate_size=176,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=2048,
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        bos_token_id=1, eos_token_id=2, hidden_act="silu"), "bfloat16", "classic", 1),
    "qwen2-bias-tied": ("Qwen2ForCausalLM", dict(
        model_type="qwen2", vocab_size=1024, hidden_size=64, intermediate_size=128,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=4096,
        tie_word_embeddings=True, use_sliding_window=False, sliding_window=None,
        max_window_layers=3, bos_token_id=1000, eos_token_id=1001, hidden_act="silu"),
        "float32", "classic", 1),
    "qwen3-qknorm": ("Qwen3ForCausalLM", dict(
        model_type="qwen3", vocab_size=1024, hidden_size=64, intermediate_size=160,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=4096,
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        sliding_window=None, max_window_layers=2, bos_token_id=1000, eos_token_id=1001,
        hidden_act="silu"), "float16", "v5", 1),
    "llama3-rope-scaling": ("LlamaForCausalLM", dict(
        model_type="llama", vocab_size=1024, hidden_size=64, intermediate_size=176,
        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
        rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=1024,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=16),
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        bos_token_id=1, eos_token_id=[2, 3], hidden_act="silu"), "bfloat16", "v5", 2),
    "mistral": ("MistralForCausalLM", dict(
        model_type="mistral", vocab_size=1024, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=4096,
        sliding_window=None, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        hidden_act="silu"), "float32", "classic", 1),
}

SEQ_LENGTHS = (24, 5)
GREEDY_PROMPT = 8
GREEDY_NEW = 32


def config_json(arch, fields, dtype, dialect):
    cfg = dict(fields)
    cfg["architectures"] = [arch]
    cfg["initializer_range"] = 0.08
    if dialect == "classic":
        cfg["torch_dtype"] = dtype
    else:
        # transformers 5: rope settings live in rope_parameters, dtype replaces torch_dtype.
        cfg["dtype"] = dtype
        params = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")}
        scaling = cfg.pop("rope_scaling", None)
        if scaling:
            params.update(scaling)
        cfg["rope_parameters"] = params
    return cfg


def randomise(model, gen):
    """Norm weights and biases start at 1 and 0 in transformers; perturb them so the test
    sees them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def write_folder(model, cfg, out_dir, dtype, shards, tie):
    os.makedirs(out_dir, exist_ok=True)
    state = {k: v.detach().to(getattr(torch, dtype)).contiguous()
             for k, v in model.state_dict().items()}
    if tie:
        state.pop("lm_head.weight", None)
    names = sorted(state)
    if shards == 1:
        save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        parts = [names[i::shards] for i in range(shards)]
        weight_map = {}
        total = 0
        for i, part in enumerate(parts):
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: state[k] for k in part}, os.path.join(out_dir, fname),
                      metadata={"format": "pt"})
            for k in part:
                weight_map[k] = fname
                total += state[k].numel() * state[k].element_size()
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    eos = cfg["eos_token_id"]
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": eos,
                   "do_sample": False}, f, indent=2)


def greedy_full_recompute(model, prompt, n):
    ids = list(prompt)
    gaps = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
        top = torch.topk(logits, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], min(gaps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="tokenizer.model copied into llama-gqa")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoConfig
    import transformers

    for idx, (name, (arch, fields, dtype, dialect, shards)) in enumerate(FIXTURES.items()):
        if args.only and name not in args.only:
            continue
        torch.manual_seed(SEED + idx)
        gen = torch.Generator().manual_seed(SEED + idx)
        cfg = config_json(arch, fields, dtype, dialect)
        hf_cfg = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
        hf_cfg.architectures = [arch]
        model = getattr(transformers, arch)(hf_cfg).float()
        randomise(model, gen)
        model_dir = os.path.join(args.out, "models", name)
        if os.path.exists(model_dir):
            shutil.rmtree(model_dir)
        write_folder(model, cfg, model_dir, dtype, shards, cfg["tie_word_embeddings"])
        if args.tokenizer and name == "llama-gqa":
            shutil.copy(args.tokenizer, os.path.join(model_dir, "tokenizer.model"))

        # The reference is what transformers makes of the folder as written.
        ref_model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="eager").eval()
        ref_dir = os.path.join(args.out, "reference", name)
        os.makedirs(ref_dir, exist_ok=True)
        rng = np.random.default_rng(SEED + idx)
        vocab = cfg["vocab_size"]
        bos = cfg["bos_token_id"]
        sequences = []
        for j, n in enumerate(SEQ_LENGTHS):
            ids = [bos] + [int(t) for t in rng.integers(3, vocab, n - 1)]
            with torch.no_grad():
                logits = ref_model(torch.tensor([ids])).logits[0].float().numpy()
            np.save(os.path.join(ref_dir, f"logits_{j}.npy"), logits.astype(np.float32))
            sequences.append({"ids": ids, "logits": f"logits_{j}.npy",
                              "logit_scale": float(np.abs(logits).max())})
        prompt = [bos] + [int(t) for t in rng.integers(3, vocab, GREEDY_PROMPT - 1)]
        cont, gap = greedy_full_recompute(ref_model, prompt, GREEDY_NEW)
        info = {"architecture": arch, "dtype": dtype, "dialect": dialect,
                "transformers": transformers.__version__, "torch": torch.__version__,
                "seed": SEED + idx, "sequences": sequences,
                "greedy": {"prompt": prompt, "continuation": cont, "min_top2_gap": gap}}
        if name == "llama3-rope-scaling":
            # Evidence that the fixture exercises rope scaling: the same weights without it.
            plain = dict(hf_cfg.to_dict())
            plain_cfg = type(hf_cfg).from_dict(plain)
            plain_cfg.rope_parameters = {"rope_type": "default",
                                         "rope_theta": cfg["rope_parameters"]["rope_theta"]}
            plain_model = getattr(transformers, arch)(plain_cfg).float().eval()
            plain_model.load_state_dict(ref_model.state_dict())
            ids = sequences[0]["ids"]
            with torch.no_grad():
                a = ref_model(torch.tensor([ids])).logits
                b = plain_model(torch.tensor([ids])).logits
            info["max_abs_diff_without_scaling"] = float((a - b).abs().max())
        with open(os.path.join(ref_dir, "reference.json"), "w") as f:
            json.dump(info, f, indent=1)
        print(name, "gap", gap, "scale", sequences[0]["logit_scale"],
              info.get("max_abs_diff_without_scaling", ""))


if __name__ == "__main__":
    main()
