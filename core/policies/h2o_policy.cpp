#include "core/policies/h2o_policy.h"

#include <algorithm>

#include "core/policies/top_scored_plan.h"

namespace engram {

std::string H2oPolicy::spec() const {
  return recent_percent_ == 50 ? name() : name() + ":recent=" + std::to_string(recent_percent_);
}

void H2oPolicy::begin_request(const WorkingSetInfo& ws) {
  for (at::Tensor& s : scores_) {
    if (s.defined() && s.size(1) > ws.tokens) s = s.narrow(1, 0, ws.tokens).contiguous();
  }
  if (ws.tokens == 0) scores_.clear();
}

std::vector<int64_t> H2oPolicy::probe_rows(const BlockInfo& block) const {
  // Every row: the accumulated score is the sum over all queries (O(S*T) per prefill block).
  std::vector<int64_t> rows(static_cast<size_t>(block.fresh_tokens));
  for (int64_t r = 0; r < block.fresh_tokens; ++r)
    rows[static_cast<size_t>(r)] = r;
  return rows;
}

void H2oPolicy::on_layer(const LayerView& view) {
  if (!view.probs.defined()) return;
  // probs [1, Hq, R, T] -> summed over rows and the group's query heads -> [Hkv, T].
  const int64_t hq = view.probs.size(1), r = view.probs.size(2), t = view.probs.size(3);
  const int64_t hkv = view.k.size(1);
  const at::Tensor add = view.probs[0].reshape({hkv, hq / hkv * r, t}).sum(1).to(at::kCPU);
  if (static_cast<int64_t>(scores_.size()) <= view.layer) scores_.resize(view.layer + 1);
  at::Tensor& s = scores_[view.layer];
  at::Tensor grown = at::zeros({hkv, t}, at::kFloat);
  if (s.defined()) {
    const int64_t kept = std::min(t, s.size(1));
    grown.narrow(1, 0, kept).copy_(s.narrow(1, 0, kept));
  }
  s = grown + add;
}

std::optional<KeepPlan> H2oPolicy::shrink(const WorkingSetInfo& ws, int64_t target) {
  target = std::max<int64_t>(0, std::min(target, ws.tokens));
  const int64_t recent = std::min(target, target * recent_percent_ / 100);
  const int64_t heavy = target - recent;
  std::vector<at::Tensor> kept_scores;
  KeepPlan plan = top_scored_plan(
      ws, target, recent,
      [&](int64_t l) {
        at::Tensor s = at::zeros({ws.kv_heads, ws.tokens}, at::kFloat);
        if (l < static_cast<int64_t>(scores_.size()) && scores_[l].defined()) {
          const int64_t scored = std::min(ws.tokens, scores_[l].size(1));
          s.narrow(1, 0, scored).copy_(scores_[l].narrow(1, 0, scored));
        }
        return s;
      },
      kept_scores);
  scores_ = std::move(kept_scores);  // kept slot j is now slot j
  plan.reason = "h2o: " + std::to_string(heavy) + " heavy hitters per head + the " +
                std::to_string(recent) + " most recent";
  return plan;
}

}  // namespace engram
