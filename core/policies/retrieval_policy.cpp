#include "core/policies/retrieval_policy.h"

#include <algorithm>

namespace engram {

PromptUnits RetrievalPolicy::ragged_prompt_units(int64_t layer, const at::Tensor& keys,
                                                 const at::Tensor& visible) {
  const int64_t heads = keys.size(0);
  const at::Tensor seen = visible.cpu();
  const auto on_device = [&](const at::Tensor& t) { return t.to(keys.device()); };
  std::vector<PromptUnits> own(static_cast<size_t>(heads));
  std::vector<at::Tensor> orders;
  int64_t most = 0, width = 0, rounds = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const at::Tensor shown = on_device(seen[h].nonzero().view(-1));
    const at::Tensor hidden = on_device(seen[h].logical_not().nonzero().view(-1));
    if (shown.numel() == 0) {
      orders.push_back(hidden);
      continue;
    }
    // The policy's own units over what this head sees (Quest: pages of its visible keys).
    PromptUnits& u = own[static_cast<size_t>(h)];
    u = prompt_units(layer, keys.narrow(0, h, 1).index_select(1, shown));
    orders.push_back(at::cat({shown.index_select(0, on_device(u.order[0])), hidden}));
    most = std::max(most, u.sizes.size(1));
    width = u.index.size(2);
    rounds = std::max(rounds, u.kmeans_rounds);
  }
  if (most == 0) width = unit_index(keys.narrow(1, 0, 1)).size(1);
  // Heads with fewer units pad with empty ones (size 0, never taken), as an empty cluster is.
  const auto longs = keys.options().dtype(at::kLong);
  PromptUnits units;
  units.order = at::stack(orders);
  units.sizes = at::zeros({heads, most}, longs);
  units.offsets = at::zeros({heads, most}, longs);
  units.index = at::zeros({heads, most, width}, keys.options().dtype(at::kFloat));
  for (int64_t h = 0; h < heads; ++h) {
    const PromptUnits& u = own[static_cast<size_t>(h)];
    if (!u.sizes.defined()) continue;
    const int64_t n = u.sizes.size(1);
    units.sizes[h].narrow(0, 0, n).copy_(u.sizes[0]);
    units.offsets[h].narrow(0, 0, n).copy_(u.offsets[0]);
    units.index[h].narrow(0, 0, n).copy_(u.index[0]);
  }
  units.kmeans_rounds = rounds;
  return units;
}

}  // namespace engram
