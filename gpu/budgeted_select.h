// Top units under a token budget, for units of different sizes (LouisKV's clusters and temporal
// segments, Quest's pages): per KV head, units in descending score order fill `budget` tokens and
// the last one taken is truncated (louiskv-paper §4.3, "selecting critical items under a fixed
// budget"). The result is the pool rows to load, so the copy needs no second pass.
//
// scores:  [H, U] f32; sizes: [H, U] int64 (0: no unit in that slot, never taken);
// offsets: [H, U] int64, the pool row where each unit starts (its tokens are contiguous).
// Returns rows [H, budget] int64 on the scores' device: the chosen units' rows in score order
// (ties: the lower unit), -1 past the end when the units hold fewer than `budget` tokens.
//
// `enabled` (optional, a one-element bool tensor on the scores' device): when it holds false
// nothing is computed and the rows are unspecified. A recorded decode step selects at every layer
// and lets the policy's decision, made on the device, switch the work off (no host sync).
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

// The most units the CUDA kernel sorts in shared memory per head; more go through the reference
// (a host round trip, which a recorded step cannot contain).
constexpr int64_t kBudgetedSelectMaxUnits = 16384;

at::Tensor budgeted_select_rows(const at::Tensor& scores, const at::Tensor& sizes,
                                const at::Tensor& offsets, int64_t budget,
                                const at::Tensor& enabled = {});

at::Tensor budgeted_select_rows_reference(const at::Tensor& scores, const at::Tensor& sizes,
                                          const at::Tensor& offsets, int64_t budget,
                                          const at::Tensor& enabled = {});

#ifdef ENGRAM_WITH_CUDA
at::Tensor budgeted_select_rows_cuda(const at::Tensor& scores, const at::Tensor& sizes,
                                     const at::Tensor& offsets, int64_t budget,
                                     const at::Tensor& enabled);
#endif

}  // namespace engram::gpu
