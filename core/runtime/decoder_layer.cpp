#include "core/runtime/decoder_layer.h"

#include "gpu/decode_linear.h"
#include "gpu/rms_norm.h"
#include "gpu/rms_norm_exact.h"
#include "gpu/silu_mul.h"

namespace engram {
namespace {

bool decode_rows(const at::Tensor& x) {
  return x.dim() >= 2 && x.size(-2) == 1;
}

// Decode rows (one per sequence) stream the weights through gpu::decode_linear (a GEMV kernel on
// CUDA) with the norm before, the SiLU gate and the residual after folded in: the same bits as
// the separate ops, in 4 kernels a layer instead of 9. Prefill keeps at::linear, cuBLAS as
// transformers calls it, and the ops one by one.
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = {}) {
  if (decode_rows(x)) return gpu::decode_linear(x, w, bias);
  return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
}

}  // namespace

at::Tensor decoder_rms_norm(const ModelConfig& config, const at::Tensor& x,
                            const at::Tensor& weight, bool fused) {
  // Decode (one row per sequence: the graph step and per-layer decode alike) takes the fused
  // kernel, where launches dominate. Prefill keeps torch's ops: the kernel's f32 reduction order
  // differs in the last bit, which moved bf16 prefill logits off transformers' by up to 0.047 on
  // qwen2.5-0.5b-random (H100, 2026-11-25); with the ops they are bit-equal, and
  // gpu::rms_norm_exact gives the ops' bits in three launches instead of eight.
  if (fused || (x.dim() >= 2 && x.size(-2) == 1))
    return gpu::rms_norm(x, weight, config.rms_norm_eps);
  return gpu::rms_norm_exact(x, weight, config.rms_norm_eps);
}

LayerQkv project_qkv(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h,
                     bool fused_norm) {
  const int64_t b = h.size(0), s = h.size(1);
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  // Decode rows normalize inside the projection: decoder_rms_norm's kernel for them, fused.
  const at::Tensor qkv =
      decode_rows(h)
          ? gpu::decode_linear(h, w.qkv_proj, w.qkv_bias,
                               {.norm_weight = w.input_norm, .norm_eps = c.rms_norm_eps})
          : project(decoder_rms_norm(c, h, w.input_norm, fused_norm), w.qkv_proj, w.qkv_bias);
  LayerQkv out;
  out.input = h;
  out.q = qkv.narrow(-1, 0, hq * hd).view({b, s, hq, hd}).transpose(1, 2);
  out.k = qkv.narrow(-1, hq * hd, hkv * hd).view({b, s, hkv, hd}).transpose(1, 2);
  out.v = qkv.narrow(-1, (hq + hkv) * hd, hkv * hd).view({b, s, hkv, hd}).transpose(1, 2);
  if (w.q_norm.defined()) {
    out.q = decoder_rms_norm(c, out.q, w.q_norm);
    out.k = decoder_rms_norm(c, out.k, w.k_norm);
  }
  return out;
}

at::Tensor finish_layer(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h,
                        const at::Tensor& attn, bool fused_norm) {
  const int64_t b = h.size(0), s = h.size(1);
  const at::Tensor flat = attn.transpose(1, 2).reshape({b, s, c.num_heads * c.head_dim});
  const int64_t inter = c.intermediate_size;
  if (decode_rows(h)) {
    const at::Tensor out = gpu::decode_linear(flat, w.o_proj, {}, {.residual = h});
    const at::Tensor act = gpu::decode_linear(
        out, w.gate_up_proj, {},
        {.norm_weight = w.post_norm, .norm_eps = c.rms_norm_eps, .glu_inter = inter});
    return gpu::decode_linear(act, w.down_proj, {}, {.residual = out});
  }
  at::Tensor out = h + project(flat, w.o_proj);
  const at::Tensor x = decoder_rms_norm(c, out, w.post_norm, fused_norm);
  const at::Tensor gate_up = project(x, w.gate_up_proj);
  // silu(gate) · up: one kernel on CUDA, bit-equal to the expression.
  return out + project(gpu::silu_mul(gate_up, inter), w.down_proj);
}

at::Tensor decoder_logits(const ModelConfig& c, const DecoderWeights& weights,
                          const at::Tensor& hidden) {
  if (decode_rows(hidden))
    return gpu::decode_linear(hidden, weights.lm_head, {},
                              {.norm_weight = weights.final_norm, .norm_eps = c.rms_norm_eps})
        .to(at::kFloat);
  return project(decoder_rms_norm(c, hidden, weights.final_norm), weights.lm_head).to(at::kFloat);
}

}  // namespace engram
