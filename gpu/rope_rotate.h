// Re-rotates post-RoPE keys by a per-token position delta: RoPE is a rotation, so
// R(p + d) k = R(d) R(p) k and a cached key moves from position p to p + d without recompute.
// Layout is the Hugging Face "rotate half" one: dimension i pairs with i + head_dim/2.
//
// keys:      [..., tokens, head_dim], f32/bf16/f16, contiguous; rotated in place.
// deltas:    [tokens] int64, on the keys' device.
// inv_freq:  [head_dim / 2] f32, on the keys' device (already RoPE-scaled).
// The angle is computed in f32 from (delta · inv_freq) so both paths agree to rounding.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

void rope_rotate_(at::Tensor& keys, const at::Tensor& deltas, const at::Tensor& inv_freq);

// The CPU reference body (any device, torch ops); rope_rotate_ dispatches to it off CUDA.
void rope_rotate_reference_(at::Tensor& keys, const at::Tensor& deltas, const at::Tensor& inv_freq);

#ifdef ENGRAM_WITH_CUDA
void rope_rotate_cuda_(at::Tensor& keys, const at::Tensor& deltas, const at::Tensor& inv_freq);
#endif

}  // namespace engram::gpu
