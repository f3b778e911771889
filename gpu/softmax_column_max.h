// The largest softmax probability in each column over a group of rows, without writing the
// probabilities: for scores [B, H, N, C] (f32; each of the N rows a query, each column a key)
//   out[b, h, c] = max over n of exp(scores[b, h, n, c] - lse[b, h, n]),
// lse the log-sum-exp of row n over its C columns. A row that is all -inf adds nothing; a column
// no row sees is 0. EpiCache's patch score (core/runtime/attention.h, cached_attention_max): on
// CUDA two passes over the scores (row log-sum-exp, then column max) instead of torch's softmax,
// renormalising and max passes (~11 over [Hkv, g·R, T] a layer, ~0.6 ms of each layer of a
// patch on the 3B shape; bench/results/2026-11-27-h100-epicache-build-gaps).
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

at::Tensor softmax_column_max(const at::Tensor& scores);

// torch's ops (any device): the definition above.
at::Tensor softmax_column_max_reference(const at::Tensor& scores);

#ifdef ENGRAM_WITH_CUDA
at::Tensor softmax_column_max_cuda(const at::Tensor& scores);  // contiguous f32 [B, H, N, C]
#endif

}  // namespace engram::gpu
