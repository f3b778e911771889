#include "core/runtime/rope.h"

#include <cmath>

#include "gpu/rope_angles.h"
#include "gpu/rope_apply.h"

namespace engram {

at::Tensor rope_inverse_frequencies(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32.
  at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor inv_freq = 1.0 / at::pow(config.rope.theta, exponents);
  const RopeConfig& r = config.rope;
  if (r.scaling == RopeScalingType::kLinear) {
    inv_freq = inv_freq / r.factor;
  } else if (r.scaling == RopeScalingType::kLlama3) {
    // Llama 3.1's frequency-dependent scaling (transformers' _compute_llama3_parameters).
    const double old_len = static_cast<double>(r.original_max_positions);
    const double low_freq_wavelen = old_len / r.low_freq_factor;
    const double high_freq_wavelen = old_len / r.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
    at::Tensor smooth =
        (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    at::Tensor is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
    inv_freq = at::where(is_medium, smoothed, scaled);
  }
  return inv_freq.to(at::kFloat).contiguous();
}

Rope::Rope(const ModelConfig& config, at::Device device)
    : inv_freq_(rope_inverse_frequencies(config).to(device)),
      max_positions_(config.max_positions) {}

std::pair<at::Tensor, at::Tensor> Rope::cos_sin(const at::Tensor& positions,
                                                at::ScalarType dtype) const {
  // freqs[b, s, i] = position · inv_freq[i], in f32 as in transformers; one kernel on CUDA.
  return gpu::rope_angles(positions, inv_freq_, dtype);
}

at::Tensor Rope::apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x·cos + rotate_half(x)·sin; one kernel on CUDA, bit-equal to the expression.
  return gpu::rope_apply(x, cos, sin);
}

at::Tensor Rope::apply(const at::Tensor& x, const at::Tensor& positions) const {
  auto [cos, sin] = cos_sin(positions, x.scalar_type());
  return apply(x, cos, sin);
}

}  // namespace engram
