// One decoder layer, written once. Every path that runs the model (Decoder::forward over any
// KvSource, the CUDA-graph decode step over a fixed working set) runs run_decoder_layer(); they
// differ only in how attention reaches its keys and values, which each passes in as `attend`.
// Projections, norms, residuals and the MLP are these functions, so the paths cannot drift apart
// (they agree token for token in f32: tests/test_static_decode.cpp).
#pragma once

#include <ATen/ATen.h>

#include "core/model/model_config.h"
#include "core/runtime/decoder_weights.h"

namespace engram {

// A layer's queries, keys and values before RoPE, [B, heads, S, head_dim] (views of one matmul's
// output; Qwen3's q/k norms applied).
struct LayerQkv {
  at::Tensor input;  // the layer input h, [B, S, hidden]
  at::Tensor q;
  at::Tensor k;
  at::Tensor v;
};

// RMSNorm as transformers' LlamaRMSNorm (f32 statistics, cast back, then the weight); the fused
// kernel on CUDA for decode rows (gpu/rms_norm.h), torch's ops for prefill (bit-equal logits).
// `fused`: the kernel for every row, for a caller that accepts its last-bit differences from
// the torch expression (KEEP's partly recomputed rows: approximate by design, launch-bound).
at::Tensor decoder_rms_norm(const ModelConfig& config, const at::Tensor& x,
                            const at::Tensor& weight, bool fused = false);

// `fused_norm`: the input norm as decoder_rms_norm(..., fused) (Qwen3's q/k norms unchanged).
LayerQkv project_qkv(const ModelConfig& config, const LayerWeights& w, const at::Tensor& h,
                     bool fused_norm = false);

// h + o_proj(attn) then h + MLP(norm(h)); attn is [B, Hq, S, head_dim].
at::Tensor finish_layer(const ModelConfig& config, const LayerWeights& w, const at::Tensor& h,
                        const at::Tensor& attn, bool fused_norm = false);

// `attend(const LayerQkv&) -> at::Tensor` applies RoPE, makes the fresh KV visible to attention
// (cache write, working set, source) and returns the attention output [B, Hq, S, head_dim].
template <class Attend>
at::Tensor run_decoder_layer(const ModelConfig& config, const LayerWeights& w, const at::Tensor& h,
                             Attend&& attend, bool fused_norms = false) {
  const LayerQkv qkv = project_qkv(config, w, h, fused_norms);
  return finish_layer(config, w, h, attend(qkv), fused_norms);
}

// Final norm and the LM head, f32 logits.
at::Tensor decoder_logits(const ModelConfig& config, const DecoderWeights& weights,
                          const at::Tensor& hidden);

}  // namespace engram
