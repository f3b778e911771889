// Rotary position embedding in the Hugging Face "rotate half" layout, with the inverse
// frequencies of the config (default, linear or llama3 scaling) computed exactly as transformers
// computes them, so that f32 results match bit for bit where the arithmetic allows.
#pragma once

#include <ATen/ATen.h>

#include "core/model/model_config.h"

namespace engram {

// [head_dim / 2] f32 on the CPU.
at::Tensor rope_inverse_frequencies(const ModelConfig& config);

class Rope {
 public:
  Rope(const ModelConfig& config, at::Device device);

  // x: [B, heads, S, head_dim]; positions: [B, S] int64 on the device. Returns the rotated x in
  // x's dtype (cos/sin are computed in f32 and cast, as transformers does).
  at::Tensor apply(const at::Tensor& x, const at::Tensor& positions) const;
  // cos/sin for positions, [B, 1, S, head_dim] in `dtype`; compute once per forward.
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& positions,
                                            at::ScalarType dtype) const;
  static at::Tensor apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

  const at::Tensor& inverse_frequencies() const { return inv_freq_; }  // on the device
  int64_t max_positions() const { return max_positions_; }

 private:
  at::Tensor inv_freq_;
  int64_t max_positions_;
};

}  // namespace engram
