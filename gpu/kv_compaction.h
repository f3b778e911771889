// A keep plan applied to every layer of a working set at once: slot j of (layer l, KV head h)
// takes slot index[l][h][j]'s value and its key re-rotated from the position that slot held to
// position j (RoPE composes: R(j - p) R(p) k = R(j) k, as gpu::rope_rotate_). The per-layer torch
// path is ~12 small launches a layer (336 for the 3B shape), each shorter on the device than its
// enqueue on the host, so the GPU waited ~10 ms a shrink of an EpiCache build; on CUDA one kernel
// does every layer, K and V, in place.
//
// keys, values: per layer [H, >= before, d] (a cache's keys(l)[0]), one dtype (f32/bf16/f16), rows
//               contiguous; slots [0, n) are rewritten.
// index:        [L, H, n] int64 on their device. `in_place`: index[l][h][j] >= j everywhere (an
//               ascending plan that pads nothing), which the CUDA kernel needs (it rewrites the
//               slots in place in chunks: a slot is read before any thread writes it); otherwise,
//               and off CUDA, the reference body.
// positions:    [before] int64, the position each slot held; inv_freq [d / 2] f32.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace engram::gpu {

void compact_kv_(const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
                 const at::Tensor& index, const at::Tensor& positions, const at::Tensor& inv_freq,
                 bool in_place);

// The reference body (torch ops a layer: gather, rotate, copy back); compact_kv_ runs it off CUDA.
void compact_kv_reference_(const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, const at::Tensor& index,
                           const at::Tensor& positions, const at::Tensor& inv_freq);

#ifdef ENGRAM_WITH_CUDA
void compact_kv_cuda_(const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
                      const at::Tensor& index, const at::Tensor& positions,
                      const at::Tensor& inv_freq);
#endif

}  // namespace engram::gpu
