#include "gpu/kv_compaction.h"

#include <stdexcept>

#include "gpu/rope_rotate.h"

namespace engram::gpu {

void compact_kv_reference_(const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, const at::Tensor& index,
                           const at::Tensor& positions, const at::Tensor& inv_freq) {
  const int64_t heads = index.size(1), n = index.size(2);
  const at::Tensor target = at::arange(n, index.options());
  for (size_t l = 0; l < keys.size(); ++l) {
    const int64_t d = keys[l].size(-1);
    const at::Tensor idx = index[static_cast<int64_t>(l)];  // [H, n]
    const at::Tensor gather_idx = idx.unsqueeze(-1).expand({heads, n, d});
    at::Tensor kept_k = keys[l].gather(1, gather_idx).contiguous();
    const at::Tensor kept_v = values[l].gather(1, gather_idx);
    // Every head's rows at once: [H·n, d] with one delta per row.
    at::Tensor rows = kept_k.view({heads * n, d});
    const at::Tensor deltas =
        (target.unsqueeze(0) - positions.index_select(0, idx.reshape({-1})).view({heads, n}))
            .reshape({-1});
    rope_rotate_(rows, deltas, inv_freq);
    keys[l].narrow(1, 0, n).copy_(kept_k);
    values[l].narrow(1, 0, n).copy_(kept_v);
  }
}

void compact_kv_(const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
                 const at::Tensor& index, const at::Tensor& positions, const at::Tensor& inv_freq,
                 bool in_place) {
  if (keys.size() != values.size() || static_cast<int64_t>(keys.size()) != index.size(0))
    throw std::invalid_argument("compact_kv_: one index row set per layer expected");
#ifdef ENGRAM_WITH_CUDA
  if (in_place && index.is_cuda() && !keys.empty()) {
    compact_kv_cuda_(keys, values, index, positions, inv_freq);
    return;
  }
#endif
  compact_kv_reference_(keys, values, index, positions, inv_freq);
}

}  // namespace engram::gpu
