#include "core/policies/snapkv_policy.h"

#include <algorithm>

#include "core/policies/top_scored_plan.h"

namespace engram {

std::string SnapKvPolicy::spec() const {
  if (window_ == 64 && kernel_ == 7) return name();
  return name() + ":window=" + std::to_string(window_) + ",kernel=" + std::to_string(kernel_);
}

void SnapKvPolicy::begin_request(const WorkingSetInfo& ws) {
  // Scores follow the working set's slots: a truncated set drops those past its end, a new one
  // all of them.
  for (at::Tensor& s : scores_) {
    if (s.defined() && s.size(1) > ws.tokens) s = s.narrow(1, 0, ws.tokens).contiguous();
  }
  if (ws.tokens == 0) scores_.clear();
  fresh_ = false;
}

std::vector<int64_t> SnapKvPolicy::probe_rows(const BlockInfo& block) const {
  if (!block.will_evict || block.phase != ForwardPhase::kPrefill) return {};
  const int64_t w = std::min(window_, block.fresh_tokens);
  std::vector<int64_t> rows;
  for (int64_t r = block.fresh_tokens - w; r < block.fresh_tokens; ++r)
    rows.push_back(r);
  return rows;
}

void SnapKvPolicy::on_layer(const LayerView& view) {
  if (!view.probs.defined()) return;
  // probs [1, Hq, R, T] -> mean over rows and the group's query heads -> [Hkv, T].
  const int64_t hq = view.probs.size(1), r = view.probs.size(2), t = view.probs.size(3);
  const int64_t hkv = view.k.size(1);
  at::Tensor s = view.probs[0].reshape({hkv, hq / hkv * r, t}).mean(1);
  if (kernel_ > 1) {
    s = at::max_pool1d(s.unsqueeze(0), {kernel_}, {1}, {kernel_ / 2}).squeeze(0);
  }
  if (static_cast<int64_t>(scores_.size()) <= view.layer) scores_.resize(view.layer + 1);
  scores_[view.layer] = s.to(at::kCPU).contiguous();
  probed_rows_ = r;
  fresh_ = true;
}

at::Tensor SnapKvPolicy::scores_for(int64_t layer, int64_t kv_heads, int64_t tokens) const {
  // Slots no window scored rank by recency above every probability (which is at most 1).
  at::Tensor s = 2.0 + at::arange(tokens, at::TensorOptions().dtype(at::kFloat)) /
                           static_cast<double>(std::max<int64_t>(tokens, 1));
  s = s.unsqueeze(0).expand({kv_heads, tokens}).clone();
  if (layer < static_cast<int64_t>(scores_.size()) && scores_[layer].defined()) {
    const int64_t scored = std::min(tokens, scores_[layer].size(1));
    s.narrow(1, 0, scored).copy_(scores_[layer].narrow(1, 0, scored));
  }
  return s;
}

std::optional<KeepPlan> SnapKvPolicy::shrink(const WorkingSetInfo& ws, int64_t target) {
  target = std::max<int64_t>(0, std::min(target, ws.tokens));
  const int64_t window = std::min(fresh_ ? probed_rows_ : window_, target);
  const int64_t choose = target - window;
  std::vector<at::Tensor> kept_scores;
  KeepPlan plan = top_scored_plan(
      ws, target, window, [&](int64_t l) { return scores_for(l, ws.kv_heads, ws.tokens); },
      kept_scores);
  // The scores follow their slots: kept slot j is now slot j.
  scores_ = std::move(kept_scores);
  fresh_ = false;
  plan.reason = "snapkv: top " + std::to_string(choose) + " per head by the last " +
                std::to_string(window) + " tokens' attention + those " + std::to_string(window);
  return plan;
}

}  // namespace engram
