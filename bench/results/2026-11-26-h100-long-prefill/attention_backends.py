# Prefill attention backends on this card, 3B shape per layer (24 q heads, 8 KV heads, d 128, bf16).
import time, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
H, Hk, D = 24, 8, 128
dev = 'cuda'
def t(fn, n=5):
    fn(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3
def first(fn):
    torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3
def flops(s, L):  # causal, bottom-right: each query row i sees L - s + i + 1 keys
    return 4 * H * D * (s * (L - s) + s * (s + 1) / 2)
for s, L in [(2048, 8192), (2048, 45056), (2048, 90112), (8192, 90112), (32768, 90112), (90112, 90112)]:
    q = torch.randn(1, H, s, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, Hk, L, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, Hk, L, D, device=dev, dtype=torch.bfloat16)
    fa = lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
    row = f"s {s:6d} L {L:6d}: flash {t(fa):8.2f} ms ({flops(s,L)/t(fa)/1e9:5.0f} TF/s)"
    # cuDNN: GQA repeated (as transformers does when the backend has no GQA), causal as torch
    # aligns it for s != L (lower-right bias object) where supported.
    kr, vr = k.repeat_interleave(H // Hk, 1), v.repeat_interleave(H // Hk, 1)
    for name, be in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            if s == L:
                f = lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
            else:
                from torch.nn.attention.bias import causal_lower_right
                bias = causal_lower_right(s, L)
                f = lambda: F.scaled_dot_product_attention(q, kr, vr, attn_mask=bias)
            with sdpa_kernel(be):
                first_ms = first(f)
                ms = t(f)
                out = f()
            ref = fa()
            err = (out.float() - ref.float()).abs().max().item()
            row += f" | {name} {ms:8.2f} ms ({flops(s,L)/ms/1e9:5.0f} TF/s, first call {first_ms:7.1f} ms, vs flash {err:.3g})"
        except Exception as e:
            row += f" | {name}: {type(e).__name__}: {str(e)[:80]}"
    print(row, flush=True)
    del q, k, v, kr, vr
    torch.cuda.empty_cache()
# A new length for cuDNN each call (the chunked prefill's case): first-call cost per new shape.
try:
    from torch.nn.attention.bias import causal_lower_right
    times = []
    for L in range(4096, 4096 + 8 * 2048, 2048):
        q = torch.randn(1, H, 2048, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, H, L, D, device=dev, dtype=torch.bfloat16)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            times.append(first(lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=causal_lower_right(2048, L))))
    print("cudnn first call per new length (ms):", [round(x, 1) for x in times])
except Exception as e:
    print("cudnn new-length test:", type(e).__name__, str(e)[:120])
print(torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))
