# Where the batch-1 decode step of a shape spends its time (CUDA graphs, bf16): linears alone,
# attention alone at a capacity, and the layer's small ops. Prints ms per token and GB/s.
import sys, json, torch, torch.nn.functional as F
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
dev = "cuda"; dt = torch.bfloat16
shapes = {
  "llama3.2-3b": dict(L=28, H=3072, I=8192, hq=24, hkv=8, hd=128, V=128256),
  "llama3.1-8b": dict(L=32, H=4096, I=14336, hq=32, hkv=8, hd=128, V=128256),
}
def graph_ms(fn, reps=50):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    g.replay(); torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps): g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / reps
out = {}
for name, s in shapes.items():
    L, H, I, hq, hkv, hd, V = s["L"], s["H"], s["I"], s["hq"], s["hkv"], s["hd"], s["V"]
    W = [dict(qkv=torch.randn((hq+2*hkv)*hd, H, device=dev, dtype=dt)*0.02,
              o=torch.randn(H, hq*hd, device=dev, dtype=dt)*0.02,
              gu=torch.randn(2*I, H, device=dev, dtype=dt)*0.02,
              d=torch.randn(H, I, device=dev, dtype=dt)*0.02,
              n1=torch.ones(H, device=dev, dtype=dt), n2=torch.ones(H, device=dev, dtype=dt)) for _ in range(L)]
    lm = torch.randn(V, H, device=dev, dtype=dt)*0.02
    wbytes = sum(sum(t.numel()*2 for t in w.values()) for w in W) + lm.numel()*2
    x = torch.randn(1, 1, H, device=dev, dtype=dt)
    xi = torch.randn(1, 1, I, device=dev, dtype=dt)
    xa = torch.randn(1, 1, hq*hd, device=dev, dtype=dt)
    def linears():
        for w in W:
            F.linear(x, w["qkv"]); F.linear(xa, w["o"]); F.linear(x, w["gu"]); F.linear(xi, w["d"])
        F.linear(x, lm)
    def mvs():
        for w in W:
            torch.mv(w["qkv"], x.view(-1)); torch.mv(w["o"], xa.view(-1)); torch.mv(w["gu"], x.view(-1)); torch.mv(w["d"], xi.view(-1))
        torch.mv(lm, x.view(-1))
    r = {"weights_GB": wbytes/1e9}
    r["linears_ms"] = graph_ms(linears); r["linears_GBps"] = wbytes/1e9/(r["linears_ms"]/1e3)
    r["mv_ms"] = graph_ms(mvs); r["mv_GBps"] = wbytes/1e9/(r["mv_ms"]/1e3)
    for nm, (N, K) in dict(qkv=((hq+2*hkv)*hd, H), o=(H, hq*hd), gu=(2*I, H), d=(H, I), lm=(V, H)).items():
        Wt = torch.randn(N, K, device=dev, dtype=dt); xx = torch.randn(1, 1, K, device=dev, dtype=dt)
        ms = graph_ms(lambda: [F.linear(xx, Wt) for _ in range(20)]) / 20
        r[f"linear_{nm}_GBps"] = N*K*2/1e9/(ms/1e3)
    # the small ops of a layer (rms norms, silu*mul, residual adds), torch ops as in the reference
    def rms(h, w):
        v = h.float().pow(2).mean(-1, keepdim=True)
        return (h.float() * torch.rsqrt(v + 1e-5)).to(dt) * w
    g = torch.randn(1, 1, 2*I, device=dev, dtype=dt)
    def small():
        h = x
        for w in W:
            a = rms(h, w["n1"]); h = h + a; b = rms(h, w["n2"])
            m = F.silu(g[..., :I]) * g[..., I:]; h = h + b
        return h
    r["small_ops_ms"] = graph_ms(small)
    for C in (12800, 112640):
        K_ = [torch.randn(hkv, C, hd, device=dev, dtype=dt) for _ in range(L)]
        V_ = [torch.randn(hkv, C, hd, device=dev, dtype=dt) for _ in range(L)]
        q = torch.randn(hkv, hq//hkv, hd, device=dev, dtype=dt)
        bias = torch.zeros(hkv, 1, C, device=dev, dtype=dt)
        def attn():
            for l in range(L):
                sc = torch.baddbmm(bias, q, K_[l].transpose(1, 2), beta=1.0, alpha=hd**-0.5)
                p = torch.softmax(sc, -1, dtype=torch.float32).to(dt)
                torch.bmm(p, V_[l])
        def sdpa():
            for l in range(L):
                F.scaled_dot_product_attention(q.view(1, hkv, hq//hkv, hd), K_[l].view(1, hkv, C, hd), V_[l].view(1, hkv, C, hd))
        kvb = 2*L*hkv*C*hd*2
        r[f"attn_{C}_ms"] = graph_ms(attn, 20); r[f"attn_{C}_GBps"] = kvb/1e9/(r[f"attn_{C}_ms"]/1e3)
        try:
            r[f"sdpa_{C}_ms"] = graph_ms(sdpa, 20); r[f"sdpa_{C}_GBps"] = kvb/1e9/(r[f"sdpa_{C}_ms"]/1e3)
        except Exception as e:
            r[f"sdpa_{C}_err"] = str(e)[:200]
        del K_, V_
    # copy bandwidth (device to device) as the roof
    big = torch.empty(2**30, device=dev, dtype=torch.uint8); big2 = torch.empty_like(big)
    ms = graph_ms(lambda: big2.copy_(big), 20); r["d2d_copy_GBps"] = 2*2**30/1e9/(ms/1e3)
    del big, big2
    out[name] = r
    print(name, json.dumps(r, indent=1), flush=True)
    del W, lm; torch.cuda.empty_cache()
print(torch.cuda.get_device_name(0))
json.dump(out, open(sys.argv[1], "w"), indent=1)
