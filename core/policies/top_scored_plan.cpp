#include "core/policies/top_scored_plan.h"

namespace engram {

KeepPlan top_scored_plan(const WorkingSetInfo& ws, int64_t target, int64_t recent,
                         const std::function<at::Tensor(int64_t layer)>& scores,
                         std::vector<at::Tensor>& kept_scores) {
  const int64_t choose = target - recent;
  const int64_t older = ws.tokens - recent;
  KeepPlan plan;
  plan.per_head.resize(ws.layers);
  kept_scores.assign(ws.layers, at::Tensor());
  for (int64_t l = 0; l < ws.layers; ++l) {
    const at::Tensor s = scores(l);  // [H, T]
    at::Tensor chosen = std::get<1>(s.narrow(1, 0, older).topk(choose, 1));
    chosen = std::get<0>(chosen.sort(1));
    const at::Tensor tail = at::arange(older, ws.tokens, at::TensorOptions().dtype(at::kLong))
                                .unsqueeze(0)
                                .expand({ws.kv_heads, recent});
    const at::Tensor keep = at::cat({chosen, tail}, 1).contiguous();  // [H, target]
    kept_scores[l] = s.gather(1, keep);
    plan.per_head[l].resize(ws.kv_heads);
    for (int64_t h = 0; h < ws.kv_heads; ++h) {
      const int64_t* p = keep[h].data_ptr<int64_t>();
      plan.per_head[l][h].assign(p, p + target);
    }
  }
  return plan;
}

}  // namespace engram
