// One Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) run layer by layer over a KvSource.
// The differences between families are data in ModelConfig / DecoderWeights; there is no
// per-architecture copy of the forward pass.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "core/kv/kv_source.h"
#include "core/model/model_config.h"
#include "core/runtime/decoder_weights.h"
#include "core/runtime/rope.h"

namespace engram {

struct ForwardRequest {
  std::vector<std::vector<int64_t>> tokens;     // [B][S]
  std::vector<std::vector<int64_t>> positions;  // [B][S]; every row the same S
  bool all_logits = false;                      // else logits of the last position only
  bool final_hidden = false;                    // also return the final normed hidden states
  ForwardPhase phase = ForwardPhase::kPrefill;
  // Rows (indices into S) whose attention probabilities on_layer receives (LayerView::probs).
  std::vector<int64_t> probe_rows;
  // Called after each layer's attention with what the layer computed (memory policies).
  std::function<void(const LayerView&)> on_layer;
};

struct ForwardResult {
  at::Tensor logits;  // f32 [B, S or 1, vocab]
  at::Tensor hidden;  // [B, S, hidden] in the compute dtype, when requested
};

class Decoder {
 public:
  Decoder(ModelConfig config, DecoderWeights weights, at::Device device, at::ScalarType dtype);

  // Runs the tokens through every layer. `timeline` must be on the decoder's device; `trace`
  // may be null. Throws std::out_of_range for a position past the model's maximum.
  ForwardResult forward(const ForwardRequest& request, KvSource& source,
                        gpu::DeviceTimeline& timeline, TraceRecorder* trace) const;

  const ModelConfig& config() const { return config_; }
  const DecoderWeights& weights() const { return weights_; }
  const Rope& rope() const { return rope_; }
  at::Device device() const { return device_; }
  at::ScalarType dtype() const { return dtype_; }

 private:
  ModelConfig config_;
  DecoderWeights weights_;
  at::Device device_;
  at::ScalarType dtype_;
  Rope rope_;
};

}  // namespace engram
