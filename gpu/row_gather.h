// Copies chosen rows of a paged KV pool into a device region, per KV head: LouisKV's load of
// retrieved clusters and segments (and Quest's pages) from its pool in pages of the pinned tier.
// On CUDA one kernel reads the pinned pages straight through unified addressing (as
// gpu/page_gather.h), instead of gathering on the CPU and copying the result; off CUDA the
// reference.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

// Keys and values at once (core/kv/kv_page_pool.h): row r of head h is row r % P of page
// table[r / P] of `layer` in slab [pages, layers, 2, H, P, d], pinned host or the compute device.
// keys, values: [H, M, d] destinations (views whose innermost dimension is contiguous); table:
// [T] int64 slab pages; rows: [H, R <= M] int64; table and rows on the destination's device. A
// negative row, or one past the table, leaves the destination row as it is. `enabled`
// (optional, one bool on the destination's device): when false nothing is copied (the recorded
// decode step's retrieval decided on the device; gpu/budgeted_select.h).
void gather_paged_rows(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab, int64_t layer,
                       const at::Tensor& table, const at::Tensor& rows,
                       const at::Tensor& enabled = {});

void gather_paged_rows_reference(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                                 int64_t layer, const at::Tensor& table, const at::Tensor& rows,
                                 const at::Tensor& enabled = {});

#ifdef ENGRAM_WITH_CUDA
void gather_paged_rows_cuda(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                            int64_t layer, const at::Tensor& table, const at::Tensor& rows,
                            const at::Tensor& enabled);
#endif

}  // namespace engram::gpu
