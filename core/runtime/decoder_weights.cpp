#include "core/runtime/decoder_weights.h"

#include <chrono>
#include <sstream>

#include "core/log.h"
#include "core/model/model_error.h"
#include "core/model/safetensors.h"
#include "core/runtime/device.h"

namespace engram {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i)
    out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

class WeightReader {
 public:
  WeightReader(const std::filesystem::path& dir, at::Device device, at::ScalarType dtype,
               const LoadProgressFn& progress)
      : files_(WeightFiles::open_folder(dir)),
        device_(device),
        dtype_(dtype),
        progress_(progress),
        start_(std::chrono::steady_clock::now()) {
    total_ = static_cast<int64_t>(files_.total_bytes());
  }

  bool has(const std::string& name) const { return files_.find(name) != nullptr; }

  at::Tensor get(const std::string& name, const std::vector<int64_t>& expected) {
    const TensorView& view = files_.at(name);
    if (view.shape != expected) {
      throw ModelError(view.file, "tensor '" + name + "' has shape " + shape_str(view.shape) +
                                      ", the config expects " + shape_str(expected));
    }
    const DType d = view.dtype;
    if (d != DType::kF32 && d != DType::kF16 && d != DType::kBF16) {
      throw ModelError(view.file, "tensor '" + name + "' has dtype " + dtype_safetensors_name(d) +
                                      "; weights must be F32, F16 or BF16");
    }
    // from_blob over the read-only mapping: the conversion below copies before anything writes.
    at::Tensor host = at::from_blob(const_cast<std::byte*>(view.data), view.shape,
                                    at::TensorOptions().dtype(to_scalar_type(d)));
    at::Tensor out = host.to(device_, dtype_, /*non_blocking=*/false, /*copy=*/true);
    done_ += static_cast<int64_t>(view.nbytes);
    if (progress_) {
      LoadProgress p;
      p.bytes_done = done_;
      p.bytes_total = total_;
      p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      p.tensor = name;
      progress_(p);
    }
    return out;
  }

 private:
  WeightFiles files_;
  at::Device device_;
  at::ScalarType dtype_;
  const LoadProgressFn& progress_;
  std::chrono::steady_clock::time_point start_;
  int64_t total_ = 0;
  int64_t done_ = 0;
};

}  // namespace

int64_t DecoderWeights::bytes() const {
  auto size = [](const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : int64_t{0};
  };
  int64_t total = size(embed) + size(final_norm);
  if (!lm_head.is_same(embed)) total += size(lm_head);
  for (const auto& l : layers) {
    for (const auto* t : {&l.input_norm, &l.qkv_proj, &l.qkv_bias, &l.q_norm, &l.k_norm, &l.o_proj,
                          &l.post_norm, &l.gate_up_proj, &l.down_proj}) {
      total += size(*t);
    }
  }
  return total;
}

DecoderWeights load_decoder_weights(const std::filesystem::path& dir, const ModelConfig& c,
                                    at::Device device, at::ScalarType dtype,
                                    const LoadProgressFn& progress) {
  WeightReader r(dir, device, dtype, progress);
  const int64_t h = c.hidden_size, hd = c.head_dim, q = c.q_size(), kv = c.kv_size();
  DecoderWeights w;
  w.embed = r.get("model.embed_tokens.weight", {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.input_norm = r.get(p + "input_layernorm.weight", {h});
    at::Tensor wq = r.get(p + "self_attn.q_proj.weight", {q, h});
    at::Tensor wk = r.get(p + "self_attn.k_proj.weight", {kv, h});
    at::Tensor wv = r.get(p + "self_attn.v_proj.weight", {kv, h});
    l.qkv_proj = at::cat({wq, wk, wv}, 0);
    if (c.attention_bias) {
      l.qkv_bias = at::cat({r.get(p + "self_attn.q_proj.bias", {q}),
                            r.get(p + "self_attn.k_proj.bias", {kv}),
                            r.get(p + "self_attn.v_proj.bias", {kv})});
    }
    if (c.qk_norm) {
      l.q_norm = r.get(p + "self_attn.q_norm.weight", {hd});
      l.k_norm = r.get(p + "self_attn.k_norm.weight", {hd});
    }
    l.o_proj = r.get(p + "self_attn.o_proj.weight", {h, q});
    l.post_norm = r.get(p + "post_attention_layernorm.weight", {h});
    at::Tensor gate = r.get(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
    at::Tensor up = r.get(p + "mlp.up_proj.weight", {c.intermediate_size, h});
    l.gate_up_proj = at::cat({gate, up}, 0);
    l.down_proj = r.get(p + "mlp.down_proj.weight", {h, c.intermediate_size});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = r.get("model.norm.weight", {h});
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    if (!r.has("lm_head.weight")) {
      throw ModelError((dir / "config.json").string(),
                       "tie_word_embeddings is false but no tensor 'lm_head.weight' exists");
    }
    w.lm_head = r.get("lm_head.weight", {c.vocab_size, h});
  }
  return w;
}

DecoderWeights random_decoder_weights(const ModelConfig& c, at::Device device, at::ScalarType dtype,
                                      uint64_t seed) {
  at::manual_seed(seed);
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  auto normal = [&](std::vector<int64_t> shape) { return at::randn(shape, opts).mul_(0.02); };
  auto ones = [&](int64_t n) { return at::ones({n}, opts); };
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size();
  DecoderWeights w;
  w.embed = normal({c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.input_norm = ones(h);
    l.qkv_proj = normal({q + 2 * kv, h});
    if (c.attention_bias) l.qkv_bias = normal({q + 2 * kv});
    if (c.qk_norm) {
      l.q_norm = ones(c.head_dim);
      l.k_norm = ones(c.head_dim);
    }
    l.o_proj = normal({h, q});
    l.post_norm = ones(h);
    l.gate_up_proj = normal({2 * c.intermediate_size, h});
    l.down_proj = normal({h, c.intermediate_size});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = ones(h);
  w.lm_head = c.tie_word_embeddings ? w.embed : normal({c.vocab_size, h});
  return w;
}

}  // namespace engram
