// The tail of one decode token's attention input, in one kernel: rotates its q and k by the
// RoPE cos/sin of its position (Hugging Face "rotate half" layout, rounded where the torch
// expression x·cos + rotate_half(x)·sin rounds) and writes k and v into the layer's cache at
// `slot`. The slot is a device scalar so that a recorded decode step can be replayed at every
// position (gpu/cuda_graph.h).
//
// q:            [hq, d]; k, v: [hkv, d]; rows contiguous (narrow views of one qkv row are fine).
// cos, sin:     [d], q's dtype.
// slot:         [1] int64 on q's device, 0 <= slot < capacity.
// q_out:        [hq, d], contiguous, receives the rotated q.
// key_cache, value_cache: [hkv, capacity, d], contiguous.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

void rope_kv_write(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slot,
                   at::Tensor& q_out, at::Tensor& key_cache, at::Tensor& value_cache);

// The CPU reference body (any device, torch ops); rope_kv_write dispatches to it off CUDA.
void rope_kv_write_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slot,
                             at::Tensor& q_out, at::Tensor& key_cache, at::Tensor& value_cache);

#ifdef ENGRAM_WITH_CUDA
void rope_kv_write_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slot,
                        at::Tensor& q_out, at::Tensor& key_cache, at::Tensor& value_cache);
#endif

}  // namespace engram::gpu
