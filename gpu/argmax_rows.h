// The greedy token of each row of f32 logits, in two passes on CUDA: the first index of the
// largest value, a NaN counted larger than any number (the first NaN wins), as at::argmax(1)
// chooses. at::argmax's reduction of one 128K-vocabulary row took 28 µs at the end of every
// recorded decode step on the H200 (one block walking the row; 2026-11-28): here blocks of 2,048
// elements each pick theirs, then one block a row picks among them.
//
// logits: [rows, vocab] f32, contiguous rows. out: [rows] int64 on the same device (written in
// place, so that a recorded step keeps its address).
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

void argmax_rows(const at::Tensor& logits, at::Tensor& out);

// at::argmax(logits, 1) into out (any device); argmax_rows runs it off CUDA.
void argmax_rows_reference(const at::Tensor& logits, at::Tensor& out);

#ifdef ENGRAM_WITH_CUDA
void argmax_rows_cuda(const at::Tensor& logits, at::Tensor& out);
#endif

}  // namespace engram::gpu
