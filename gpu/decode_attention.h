// Attention of one new token per sequence row over a KV cache's slots (the decode step), split
// over the slots (flash-decoding): one wave of blocks (as many as the SMs hold) walk balanced runs
// of the slots in use in tiles of 16 KiB of keys (64 slots at bf16, d = 128) with an online
// softmax, each issuing the next tile's copies
// while it computes on this one, and each write a partial (max, sum, weighted values); a second
// kernel combines them. Slots past a row's newest one are not read,
// so a cache recorded with room to grow (a CUDA graph's capacity) costs only what it holds; the
// torch path (baddbmm, softmax, bmm) read every slot of the capacity at ~1.1-1.6 TB/s on an H100.
//
// Shapes: R rows, Hq = g * Hkv query heads, C slots, d = head_dim.
//   q             [R, Hq, d] after RoPE, f32/bf16/f16
//   keys, values  [R, Hkv, C, d], q's dtype; each (row, head) a contiguous [C, d] block
//   key_positions [R, C] int64 (slot stride 1), or undefined: every slot up to the newest visible
//   key_valid     [R, Hkv, C] bool (slot stride 1), or undefined: a ragged set's per-head slots
//   positions     [R] int64: the query's position
//   last_slots    [R] int64: the newest slot row r holds (its own token's); later slots unread
// A key is seen when 0 <= its position <= the query's (and > position - window when window > 0)
// and its slot is valid; an unseen slot weighs nothing whatever it holds. Scores and the softmax
// are f32; the output is rounded once to q's dtype. A row that sees no key gets zeros.
// Returns [R, Hq, d].
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace engram::gpu {

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& key_positions, const at::Tensor& key_valid,
                            const at::Tensor& positions, const at::Tensor& last_slots,
                            int64_t window, double scale);

// The CPU reference body (any device, torch ops); decode_attention dispatches to it off CUDA and
// for shapes the kernel does not take (decode_attention_kernel_fits).
at::Tensor decode_attention_reference(const at::Tensor& q, const at::Tensor& keys,
                                      const at::Tensor& values, const at::Tensor& key_positions,
                                      const at::Tensor& key_valid, const at::Tensor& positions,
                                      const at::Tensor& last_slots, int64_t window, double scale);

// Whether the CUDA kernel takes these shapes: head_dim 64/128/256 (f32: 64/128), at most 8
// query heads per KV head, the layouts above.
bool decode_attention_kernel_fits(const at::Tensor& q, const at::Tensor& keys,
                                  const at::Tensor& values, const at::Tensor& key_positions,
                                  const at::Tensor& key_valid);

#ifdef ENGRAM_WITH_CUDA
at::Tensor decode_attention_cuda(const at::Tensor& q, const at::Tensor& keys,
                                 const at::Tensor& values, const at::Tensor& key_positions,
                                 const at::Tensor& key_valid, const at::Tensor& positions,
                                 const at::Tensor& last_slots, int64_t window, double scale);
#endif

}  // namespace engram::gpu
