#include "core/policies/page_retrieval_policy.h"

#include <algorithm>

namespace engram {

PageRetrievalPolicy::PageRetrievalPolicy(int64_t page, RetrievalSettings settings)
    : page_(std::max<int64_t>(1, page)) {
  settings_ = settings;
}

std::string PageRetrievalPolicy::spec() const {
  std::string s = "pageretrieval:sinks=" + std::to_string(settings_.sinks) +
                  ",window=" + std::to_string(settings_.window) +
                  ",budget=" + std::to_string(settings_.budget);
  if (page_ != 16) s += ",page=" + std::to_string(page_);
  if (settings_.full_layers != 2) s += ",full_layers=" + std::to_string(settings_.full_layers);
  if (settings_.prompt_by_decode) s += ",prompt=1";
  if (settings_.offload >= 0) s += ",offload=" + std::to_string(settings_.offload);
  if (!settings_.overlap_prefill) s += ",overlap=0";
  if (settings_.index_on_host) s += ",host_index=1";
  return s;
}

PromptUnits PageRetrievalPolicy::prompt_units(int64_t /*layer*/, const at::Tensor& keys) {
  const int64_t heads = keys.size(0), n = keys.size(1), d = keys.size(2);
  const int64_t pages = (n + page_ - 1) / page_;
  const auto longs = keys.options().dtype(at::kLong);
  PromptUnits units;
  units.order = at::arange(n, longs).unsqueeze(0).expand({heads, n}).contiguous();
  units.offsets =
      (at::arange(pages, longs) * page_).unsqueeze(0).expand({heads, pages}).contiguous();
  units.sizes = (n - units.offsets).clamp_max(page_);
  // Pad the last page with its own first key so min/max over whole pages stay its own bounds.
  at::Tensor padded = keys.to(at::kFloat);
  if (pages * page_ > n) {
    padded = at::cat(
        {padded, padded.narrow(1, (pages - 1) * page_, 1).expand({heads, pages * page_ - n, d})},
        1);
  }
  padded = padded.view({heads, pages, page_, d});
  units.index = at::cat({std::get<0>(padded.min(2)), std::get<0>(padded.max(2))}, -1);
  return units;
}

at::Tensor PageRetrievalPolicy::unit_index(const at::Tensor& keys) const {
  const at::Tensor k = keys.to(at::kFloat);
  return at::cat({std::get<0>(k.min(1)), std::get<0>(k.max(1))}, -1);
}

at::Tensor PageRetrievalPolicy::score(
    const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
    const at::Tensor& /*enabled: Quest retrieves at every step*/) const {
  const int64_t heads = index.size(0), d = q.size(1);
  const at::Tensor grouped = q.to(at::kFloat).view({heads, -1, 1, d});  // [H, g, 1, d]
  const at::Tensor kmin = index.narrow(-1, 0, d).unsqueeze(1);          // [H, 1, U, d]
  const at::Tensor kmax = index.narrow(-1, d, d).unsqueeze(1);
  const at::Tensor bound = at::maximum(grouped * kmin, grouped * kmax).sum(-1).mean(1);  // [H, U]
  return live.defined() ? at::where(live, bound, -INFINITY) : bound;  // one kernel, as louiskv's
}

}  // namespace engram
