// Brings whole pages of one layer from a page slab into the slots of a working set (and back,
// scatter_pages): the copy the unit loader (core/kv/kv_unit_pool.h) issues per layer on the copy
// stream. On CUDA one kernel reads every page straight from pinned host memory (unified addressing:
// the slab's host pointer is valid on the device) or from device memory, instead of one cudaMemcpy
// per page, head and K/V, which left the copies bound by launch overhead at ~2 GB/s (bench pages,
// H100, 2026-11-25).
//
// slab:   [pages, layers, 2 (k, v), kv_heads, page_tokens, head_dim], pinned host or device.
// keys, values: [kv_heads, capacity, head_dim] views (row 0 of a KvCache layer), innermost
//         dimension contiguous, the slab's dtype, on the working set's device.
// pages:  [n] int64 slab page numbers; slots: [n] int64 first destination slot of each page;
//         counts: [n] int64 tokens of each page to copy (a unit's last page is partly filled:
//         only its tokens are written, so pages of consecutive units never overlap). All three
//         on the working set's device.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

void gather_pages(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab, int64_t layer,
                  const at::Tensor& pages, const at::Tensor& slots, const at::Tensor& counts);

// The inverse, with the same table: the slots of a working set written into pages of one layer
// of the slab (a unit taken out of a working set: an episode's write-back to the pinned pool).
// Only counts[i] rows of each page are written, from its row first_rows[i] (int64 beside the
// table; undefined: row 0), so rows can be appended to a partly filled page (LouisKV's pool,
// core/kv/retrieval_kv_source.h). A host reader of a pinned slab must synchronise first.
void scatter_pages(at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                   const at::Tensor& values, const at::Tensor& pages, const at::Tensor& slots,
                   const at::Tensor& counts, const at::Tensor& first_rows = {});

// The reference body (torch copies, one per page and K/V); gather_pages uses it off CUDA.
void gather_pages_reference(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                            int64_t layer, const at::Tensor& pages, const at::Tensor& slots,
                            const at::Tensor& counts);

void scatter_pages_reference(at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                             const at::Tensor& values, const at::Tensor& pages,
                             const at::Tensor& slots, const at::Tensor& counts,
                             const at::Tensor& first_rows = {});

#ifdef ENGRAM_WITH_CUDA
void gather_pages_cuda(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab, int64_t layer,
                       const at::Tensor& pages, const at::Tensor& slots, const at::Tensor& counts);
void scatter_pages_cuda(at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                        const at::Tensor& values, const at::Tensor& pages, const at::Tensor& slots,
                        const at::Tensor& counts, const at::Tensor& first_rows);
#endif

}  // namespace engram::gpu
