// The weights of a Llama-family decoder on one device, in the compute dtype. q/k/v and
// gate/up projections are fused at load time (one matmul instead of three or two); the names
// and shapes checked are those of the Hugging Face checkpoint, so a mismatch names the tensor.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/model/model_config.h"

namespace engram {

struct LayerWeights {
  at::Tensor input_norm;    // [hidden]
  at::Tensor qkv_proj;      // [q + 2·kv, hidden]
  at::Tensor qkv_bias;      // [q + 2·kv] or undefined
  at::Tensor q_norm;        // [head_dim] or undefined (Qwen3)
  at::Tensor k_norm;        // [head_dim] or undefined
  at::Tensor o_proj;        // [hidden, q]
  at::Tensor post_norm;     // [hidden]
  at::Tensor gate_up_proj;  // [2·intermediate, hidden]
  at::Tensor down_proj;     // [hidden, intermediate]
};

struct DecoderWeights {
  at::Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]; the embedding when tied
  int64_t bytes() const;
};

struct LoadProgress {
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  double seconds = 0;
  std::string tensor;
};
using LoadProgressFn = std::function<void(const LoadProgress&)>;

// Loads DIR's safetensors for `config`. Throws ModelError naming the tensor, the file and the
// expected shape when a weight is missing or has the wrong shape or dtype.
DecoderWeights load_decoder_weights(const std::filesystem::path& dir, const ModelConfig& config,
                                    at::Device device, at::ScalarType dtype,
                                    const LoadProgressFn& progress);

// Random weights of the config's shape (normal, std 0.02; norms 1) for speed work.
DecoderWeights random_decoder_weights(const ModelConfig& config, at::Device device,
                                      at::ScalarType dtype, uint64_t seed);

}  // namespace engram
