// Copies chosen rows of a KV pool into a device region, per KV head: LouisKV's load of retrieved
// clusters and segments (and Quest's pages) from the CPU pool. On CUDA one kernel reads the pinned
// pool straight through unified addressing (as gpu/page_gather.h), instead of gathering on the CPU
// and copying the result; off CUDA the reference.
//
// dst:  [H, M, d] (a view whose innermost dimension is contiguous) on the compute device.
// src:  [H, N, d] contiguous, pinned host or the compute device, dst's dtype.
// rows: [H, R] int64 on the compute device, R <= M: dst[h, j] = src[h, rows[h, j]]; a row of -1
//       leaves dst[h, j] as it is.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

void gather_rows(at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows);

void gather_rows_reference(at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows);

#ifdef ENGRAM_WITH_CUDA
void gather_rows_cuda(at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows);
#endif

}  // namespace engram::gpu
