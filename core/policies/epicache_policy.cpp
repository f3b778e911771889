#include "core/policies/epicache_policy.h"

#include <algorithm>

namespace engram {

at::Tensor patch_scores(const at::Tensor& probs, int64_t kv_heads, int64_t cached,
                        bool renormalise) {
  const int64_t hq = probs.size(1);
  at::Tensor p = probs[0].narrow(2, 0, cached).to(at::kFloat);  // [Hq, R, cached]
  if (renormalise) p = p / p.sum(2, true).clamp_min(1e-30);
  // Max over the patch rows, then over the query heads that share each KV head.
  return std::get<0>(std::get<0>(p.max(1)).reshape({kv_heads, hq / kv_heads, cached}).max(1));
}

std::string EpiCachePolicy::spec() const {
  const EpiCacheOptions d;
  std::string out;
  const auto add = [&](const char* key, int64_t v, int64_t fallback) {
    if (v != fallback) out += (out.empty() ? "" : ",") + std::string(key) + "=" + std::to_string(v);
  };
  add("episodes", options_.episodes, d.episodes);
  add("w_embed", options_.w_embed, d.w_embed);
  add("patch", static_cast<int64_t>(options_.patch), static_cast<int64_t>(d.patch));
  add("window", options_.window, d.window);
  add("tail", options_.tail, d.tail);
  add("per_head", options_.per_head, d.per_head);
  add("embed", options_.lexical, d.lexical);
  add("centre", options_.centre, d.centre);
  return out.empty() ? name() : name() + ":" + out;
}

std::string EpiCachePolicy::episode_patch_text(const std::string& window_text) {
  return "\nQuestion: Extract the essential information of this conversation segment:\n" +
         window_text + "Answer:";
}

std::string EpiCachePolicy::infinipot_patch_text() {
  return "\nQuestion: Summarize the previous context highlighting the most important parts.\n"
         "Answer:";
}

std::vector<int64_t> EpiCachePolicy::patch_tokens() const {
  return uses_window() ? std::vector<int64_t>{} : patch_;
}

void EpiCachePolicy::begin_request(const WorkingSetInfo& ws) {
  for (at::Tensor& s : scores_) {
    if (s.defined() && s.size(1) > ws.tokens) s = s.narrow(1, 0, ws.tokens).contiguous();
  }
  if (ws.tokens == 0) scores_.clear();
}

std::vector<int64_t> EpiCachePolicy::probe_rows(const BlockInfo& block) const {
  if (!uses_window() || !block.will_evict || block.phase != ForwardPhase::kPrefill) return {};
  const int64_t w = std::min(options_.window, block.fresh_tokens);
  std::vector<int64_t> rows;
  for (int64_t r = block.fresh_tokens - w; r < block.fresh_tokens; ++r)
    rows.push_back(r);
  return rows;
}

void EpiCachePolicy::on_layer(const LayerView& view) {
  if (!view.probs.defined()) return;
  const int64_t t = view.probs.size(3), r = view.probs.size(2);
  const int64_t kv_heads = view.k.size(1);
  // The episode and infinipot patches score the cached tokens (all but the patch's own columns);
  // the snapkv window scores every key, itself included, as SnapKV does.
  const bool patched = !uses_window();
  const at::Tensor s = patch_scores(view.probs, kv_heads, patched ? t - r : t, patched);
  if (static_cast<int64_t>(scores_.size()) <= view.layer) scores_.resize(view.layer + 1);
  scores_[view.layer] = s.to(at::kCPU).contiguous();
}

at::Tensor EpiCachePolicy::scores_for(int64_t layer, int64_t kv_heads, int64_t tokens) const {
  // Slots no patch scored rank by recency above every probability (which is at most 1).
  at::Tensor s = 2.0 + at::arange(tokens, at::TensorOptions().dtype(at::kFloat)) /
                           static_cast<double>(std::max<int64_t>(tokens, 1));
  s = s.unsqueeze(0).expand({kv_heads, tokens}).clone();
  if (layer < static_cast<int64_t>(scores_.size()) && scores_[layer].defined()) {
    const int64_t scored = std::min(tokens, scores_[layer].size(1));
    s.narrow(1, 0, scored).copy_(scores_[layer].narrow(1, 0, scored));
  }
  if (!options_.per_head) s = std::get<0>(s.max(0, true)).expand({kv_heads, tokens}).clone();
  return s;
}

std::optional<KeepPlan> EpiCachePolicy::shrink(const WorkingSetInfo& ws, int64_t target) {
  target = std::max<int64_t>(0, std::min(target, ws.tokens));
  const int64_t tail =
      std::min(uses_window() ? std::max(options_.tail, options_.window) : options_.tail, target);
  const int64_t choose = target - tail;
  const int64_t older = ws.tokens - tail;
  KeepPlan plan;
  plan.per_head.resize(ws.layers);
  std::vector<at::Tensor> kept_scores(ws.layers);
  for (int64_t l = 0; l < ws.layers; ++l) {
    const at::Tensor s = scores_for(l, ws.kv_heads, ws.tokens);  // [H, T]
    at::Tensor chosen = std::get<1>(s.narrow(1, 0, older).topk(choose, 1));
    chosen = std::get<0>(chosen.sort(1));
    const at::Tensor recent = at::arange(older, ws.tokens, at::TensorOptions().dtype(at::kLong))
                                  .unsqueeze(0)
                                  .expand({ws.kv_heads, tail});
    const at::Tensor keep = at::cat({chosen, recent}, 1).contiguous();  // [H, target]
    kept_scores[l] = s.gather(1, keep);
    plan.per_head[l].resize(ws.kv_heads);
    for (int64_t h = 0; h < ws.kv_heads; ++h) {
      const int64_t* p = keep[h].data_ptr<int64_t>();
      plan.per_head[l][h].assign(p, p + target);
    }
  }
  // The scores follow their slots (kept slot j is now slot j); a later shrink without a fresh
  // patch (decode) ranks by them.
  scores_ = std::move(kept_scores);
  plan.reason = "epicache: top " + std::to_string(choose) +
                " per head by the patch's attention + " + "the last " + std::to_string(tail);
  return plan;
}

}  // namespace engram
