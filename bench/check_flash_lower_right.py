# Device check: torch's flash op with is_causal=True aligns a short query block to the END of its
# keys (bottom-right), which core/runtime/attention.cpp relies on for a prefill block after its
# prefix (GQA heads unrepeated). Compared against an explicit lower-right mask in f32.
import torch
torch.manual_seed(0)
B,H,Hk,S,T,D=1,24,8,64,256,128
q=torch.randn(B,H,S,D,device='cuda',dtype=torch.bfloat16)
k=torch.randn(B,Hk,T,D,device='cuda',dtype=torch.bfloat16)
v=torch.randn(B,Hk,T,D,device='cuda',dtype=torch.bfloat16)
out=torch.ops.aten._scaled_dot_product_flash_attention(q,k,v,0.0,True)[0]
i=torch.arange(S,device='cuda')[:,None]+T-S; j=torch.arange(T,device='cuda')[None,:]
mask=j<=i
ref=torch.nn.functional.scaled_dot_product_attention(q.float(),k.float().repeat_interleave(H//Hk,1),v.float().repeat_interleave(H//Hk,1),attn_mask=mask)
print("flash lower-right vs reference max diff", (out.float()-ref).abs().max().item())
