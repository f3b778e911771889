#include "core/policies/epicache_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/runtime/attention.h"
#include "gpu/env_flag.h"

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
  add("tau", options_.tau_percent, d.tau_percent);
  add("max_episodes", options_.max_episodes, d.max_episodes);
  add("rebuild", options_.rebuild_tokens, d.rebuild_tokens);
  add("calibrated", options_.calibrated, d.calibrated);
  if (!layer_budgets_.empty()) {  // last: the list's commas read up to the next key=value
    out += (out.empty() ? "" : ",") + std::string("layers=");
    for (size_t l = 0; l < layer_budgets_.size(); ++l)
      out += (l ? "," : "") + std::to_string(layer_budgets_[l]);
  }
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
  std::vector<int64_t> rows;
  for (int64_t r = first_window_row(block.fresh_tokens); r < block.fresh_tokens; ++r)
    rows.push_back(r);
  return rows;
}

bool EpiCachePolicy::probe_probabilities() const {
  static const bool probed = gpu::env_flag("ENGRAM_PROBED_WINDOW");
  return probed;
}

int64_t EpiCachePolicy::first_window_row(int64_t fresh_tokens) const {
  return fresh_tokens - std::min(options_.window, fresh_tokens);
}

void EpiCachePolicy::on_layer(const LayerView& view) {
  // The episode and infinipot patches score the cached tokens (all but the patch's own columns);
  // the snapkv window scores every key, itself included, as SnapKV does. Neither comes with
  // probabilities (patch_probabilities(), probe_probabilities()): a patch forward's rows are
  // all the patch, the window is the block's last rows (probe_rows()), both scored from their
  // queries and the keys without materializing probabilities (at 32K under an 8K budget on the
  // 8B shape, the window's f32 probabilities took ~0.4 ms a layer of every block); probabilities
  // a runner still hands over are taken as given.
  const bool patched = !uses_window();
  const int64_t kv_heads = view.k.size(1);
  at::Tensor s;
  if (view.probs.defined()) {
    const int64_t t = view.probs.size(3), r = view.probs.size(2);
    s = patch_scores(view.probs, kv_heads, patched ? t - r : t, patched);
  } else if (patched && view.q.defined()) {
    const int64_t cached = view.kv.keys.size(2) - view.q.size(2);
    s = cached_attention_max(view.q, view.kv, view.positions, view.window, cached)[0];
  } else if (view.q.defined()) {
    const int64_t first = first_window_row(view.q.size(2)), rows = view.q.size(2) - first;
    s = cached_attention_max(view.q.narrow(2, first, rows), view.kv,
                             view.positions.narrow(1, first, rows), view.window,
                             view.kv.keys.size(2), /*causal=*/true)[0];
  } else {
    return;
  }
  // Slots a ragged plan left empty in a head (attention's key_valid) are never worth keeping.
  if (view.kv.key_valid.defined())
    s.masked_fill_(view.kv.key_valid[0].narrow(1, 0, s.size(1)).logical_not().to(s.device()),
                   -std::numeric_limits<float>::infinity());
  if (static_cast<int64_t>(scores_.size()) <= view.layer) scores_.resize(view.layer + 1);
  scores_[view.layer] = s.contiguous();  // stays where attention ran: shrink() ranks there
}

namespace {

// Slots no patch scored rank by recency above every probability (which is at most 1): f32
// [tokens] on `device`.
at::Tensor recency_ranks(int64_t tokens, at::Device device) {
  return 2.0 + at::arange(tokens, at::TensorOptions().dtype(at::kFloat).device(device)) /
                   static_cast<double>(std::max<int64_t>(tokens, 1));
}

}  // namespace

at::Tensor EpiCachePolicy::scores_for(int64_t layer, int64_t kv_heads, int64_t tokens) const {
  const bool scored_layer =
      layer < static_cast<int64_t>(scores_.size()) && scores_[layer].defined();
  const at::Device device = scored_layer ? scores_[layer].device() : at::Device(at::kCPU);
  at::Tensor s = recency_ranks(tokens, device).unsqueeze(0).expand({kv_heads, tokens}).clone();
  if (scored_layer) {
    const int64_t scored = std::min(tokens, scores_[layer].size(1));
    s.narrow(1, 0, scored).copy_(scores_[layer].narrow(1, 0, scored));
  }
  if (options_.per_head == 0) s = std::get<0>(s.max(0, true)).expand({kv_heads, tokens}).clone();
  return s;
}

int64_t EpiCachePolicy::layer_keep(int64_t layer, int64_t layers, int64_t target) const {
  if (layer_budgets_.empty()) return target;
  if (static_cast<int64_t>(layer_budgets_.size()) != layers) {
    throw std::invalid_argument("epicache: " + std::to_string(layer_budgets_.size()) +
                                " layer budgets for a model of " + std::to_string(layers) +
                                " layers");
  }
  const int64_t m = layer_budgets_[static_cast<size_t>(layer)];
  // M_l is set at the budget; other targets (decode slack, positions) scale it.
  const double scale = budget() > 0 ? static_cast<double>(target) / budget() : 1.0;
  return std::clamp<int64_t>(std::llround(m * scale), 0, target);
}

namespace {

// Ada-KV's joint selection, every layer at once: of s [L, H, T] the top `pairs[l]` (head, slot)
// pairs of each layer with at most `cap` slots per head and none scored -inf (an empty slot), ties
// to the lower head and slot. Computed where the scores are: a head keeps at most its own best
// `cap`, so a layer's pairs are the first of those in one stable descending sort (head-major,
// which keeps the tie rule). Returns [L, H, cap'] int64 (cap' = cap within 0..T): each head's
// slots ascending, then `none`. Ranking every layer on the host (its scores copied, one sort of
// H·T) took ~5 s of a 32K prompt's prefill on the 8B shape (48 shrinks x 32 layers); layer by
// layer on the device, ~20 ms of launches a shrink.
at::Tensor joint_top(const at::Tensor& s, const std::vector<int64_t>& pairs, int64_t cap,
                     int64_t none) {
  const int64_t layers = s.size(0), heads = s.size(1), t = s.size(2);
  cap = std::clamp<int64_t>(cap, 0, t);
  const auto longs = s.options().dtype(at::kLong);
  if (cap == 0) return at::full({layers, heads, 0}, none, longs);
  auto [best, slot] = s.sort(/*stable=*/true, 2, /*descending=*/true);
  best = best.narrow(2, 0, cap);
  slot = slot.narrow(2, 0, cap);
  const at::Tensor rank = std::get<1>(
      best.reshape({layers, heads * cap}).sort(/*stable=*/true, 1, /*descending=*/true));
  // Each pair's place in its layer's ranking; the first pairs[l] places are taken.
  const at::Tensor place = at::empty_like(rank).scatter_(
      1, rank, at::arange(heads * cap, longs).view({1, -1}).expand({layers, heads * cap}));
  const at::Tensor quota = at::tensor(pairs, at::kLong).to(s.device()).view({layers, 1});
  const at::Tensor taken =
      place.lt(quota).view({layers, heads, cap}) & best.ne(-std::numeric_limits<float>::infinity());
  return std::get<0>(slot.masked_fill(taken.logical_not(), none).sort(2));
}

// Each head's kept list as the plan's slots: its picks (ascending, `tokens` past them, [..., W];
// `count` [..., 1] of them real) then the tail older..tokens-1, right-aligned in n slots after
// padding entries of -1 (KeepPlan::slots). Batched over any leading dimensions (a layer's heads,
// or every layer's).
at::Tensor kept_slots(const at::Tensor& picks, const at::Tensor& count, int64_t older,
                      int64_t tokens, int64_t n) {
  const int64_t width = picks.size(-1);
  // k: the place in the head's list that slot j holds (< 0 on padding).
  const at::Tensor k = at::arange(n, picks.options()) - (n - (count + tokens - older));
  const at::Tensor from_picks =
      width > 0 ? picks.gather(-1, k.clamp(0, width - 1)) : at::zeros_like(k);
  return at::where(k.lt(count), from_picks, k - count + older).masked_fill_(k.lt(0), -1);
}

}  // namespace

at::Tensor EpiCachePolicy::all_layer_scores(int64_t layers, int64_t kv_heads,
                                            int64_t tokens) const {
  if (static_cast<int64_t>(scores_.size()) != layers || layers == 0) return {};
  for (const at::Tensor& s : scores_) {
    if (!s.defined() || s.sizes() != scores_[0].sizes() || s.device() != scores_[0].device() ||
        s.size(0) != kv_heads || s.size(1) > tokens)
      return {};
  }
  // As scores_for, every layer at once.
  at::Tensor s =
      recency_ranks(tokens, scores_[0].device()).view({1, 1, tokens}).repeat({layers, kv_heads, 1});
  s.narrow(2, 0, scores_[0].size(1)).copy_(at::stack(scores_));
  if (options_.per_head == 0) s = std::get<0>(s.max(1, true)).expand({layers, kv_heads, tokens});
  return s.contiguous();
}

std::optional<KeepPlan> EpiCachePolicy::shrink(const WorkingSetInfo& ws, int64_t target) {
  target = std::max<int64_t>(0, std::min(target, ws.tokens));
  const int64_t tail_rule =
      uses_window() ? std::max(options_.tail, options_.window) : options_.tail;
  const float empty = -std::numeric_limits<float>::infinity();
  KeepPlan plan;
  std::vector<int64_t> choose(ws.layers), older(ws.layers);
  for (int64_t l = 0; l < ws.layers; ++l) {
    const int64_t keep = layer_keep(l, ws.layers, target);
    const int64_t tail = std::min(tail_rule, keep);
    choose[l] = keep - tail;
    older[l] = ws.tokens - tail;
  }
  // Ranked where the scores are (the GPU in a CUDA session): with equal budgets in one top-k and
  // one sort over [L, H, T] (per layer they were ~10 small kernels a layer, ~30 % of a 3B episode
  // build's launches); joint selection likewise when the layers' tails are equal (layer budgets
  // differ only in how many pairs each layer takes); per layer otherwise. Ranking on the host
  // (scores copied per layer, lists built per head) cost ~170 ms a shrink on an 8B shape, and
  // building one episode from a 20K-token history shrinks 40 times.
  bool same_tail = true, uniform = options_.per_head != 2;
  for (int64_t l = 1; l < ws.layers; ++l) {
    same_tail = same_tail && older[l] == older[0];
    uniform = uniform && choose[l] == choose[0];
  }
  const bool joint = options_.per_head == 2;
  at::Tensor stacked = same_tail && (uniform || joint)
                           ? all_layer_scores(ws.layers, ws.kv_heads, ws.tokens)
                           : at::Tensor();
  std::vector<at::Tensor> scores(ws.layers);
  for (int64_t l = 0; l < ws.layers; ++l)
    scores[l] = stacked.defined() ? stacked[l] : scores_for(l, ws.kv_heads, ws.tokens);  // [H, T]
  std::vector<at::Tensor> picked;      // [H·width] per layer, or one [L, H, W]: ascending slots
  std::vector<int64_t> width(choose);  // slots each head's row of `picked` holds, per layer
  if (stacked.defined() && joint) {
    std::vector<int64_t> pairs(choose);
    for (int64_t& p : pairs)
      p *= ws.kv_heads;
    picked.push_back(joint_top(stacked.narrow(2, 0, older[0]), pairs,
                               target - (ws.tokens - older[0]), ws.tokens));
  } else if (stacked.defined()) {
    const auto [top, index] = stacked.narrow(2, 0, older[0]).topk(choose[0], 2);
    // An empty slot is never worth keeping: marked ws.tokens, it sorts after every real slot.
    picked.push_back(std::get<0>(index.masked_fill(top == empty, ws.tokens).sort(2)));
  } else {
    for (int64_t l = 0; l < ws.layers; ++l) {
      const at::Tensor candidates = scores[l].narrow(1, 0, older[l]);
      if (joint) {
        const at::Tensor picks = joint_top(candidates.unsqueeze(0), {choose[l] * ws.kv_heads},
                                           target - (ws.tokens - older[l]), ws.tokens)[0];
        width[l] = picks.size(1);
        picked.push_back(picks.reshape({-1}));
        continue;
      }
      const auto [top, index] = candidates.topk(choose[l], 1);
      picked.push_back(
          std::get<0>(index.masked_fill(top == empty, ws.tokens).sort(1)).reshape({-1}));
    }
  }
  // The lists stay where they were ranked, as the plan's slots (KeepPlan::slots); the host
  // learns only n, the longest list (building the lists and the runner's index on the host cost
  // ~10 ms a shrink on the 8B shape at 8K slots: 2M entries, each built twice).
  std::vector<at::Tensor> counts(picked.size());   // [.., H, 1]: real picks of each head
  std::vector<at::Tensor> lengths(picked.size());  // [L or 1, H] list length of each head
  for (size_t i = 0; i < picked.size(); ++i) {
    const at::Tensor picks =
        stacked.defined() ? picked[i] : picked[i].view({ws.kv_heads, width[i]});
    counts[i] = picks.lt(ws.tokens).sum(-1, true);
    lengths[i] = counts[i].squeeze(-1) + (ws.tokens - older[i]);
  }
  const int64_t n = lengths.empty() ? 0 : at::stack(lengths).max().item<int64_t>();
  // The scores follow their slots (kept slot j is now slot j, padding scores -inf); a later
  // shrink without a fresh patch (decode) ranks by them.
  if (stacked.defined()) {
    plan.slots = kept_slots(picked[0], counts[0], older[0], ws.tokens, n);  // [L, H, n]
    const at::Tensor kept =
        stacked.gather(2, plan.slots.clamp_min(0)).masked_fill_(plan.slots.lt(0), empty);
    for (int64_t l = 0; l < ws.layers; ++l)
      scores[l] = kept[l];
  } else {
    std::vector<at::Tensor> layer_slots(ws.layers);
    for (int64_t l = 0; l < ws.layers; ++l) {
      layer_slots[l] =
          kept_slots(picked[l].view({ws.kv_heads, width[l]}), counts[l], older[l], ws.tokens, n);
      scores[l] = scores[l]
                      .gather(1, layer_slots[l].clamp_min(0))
                      .masked_fill_(layer_slots[l].lt(0), empty);
    }
    plan.slots = ws.layers > 0 ? at::stack(layer_slots) : at::empty({0, ws.kv_heads, 0}, at::kLong);
  }
  scores_ = std::move(scores);
  const char* how = options_.per_head == 2   ? " (head, token) pairs per layer jointly"
                    : options_.per_head == 1 ? " per head"
                                             : " per layer";
  plan.reason = "epicache: top " + std::to_string(target - std::min(tail_rule, target)) + how +
                " by the patch's attention + the last " +
                std::to_string(std::min(tail_rule, target)) +
                (layer_budgets_.empty() ? "" : ", layer budgets");
  static const bool host_lists = gpu::env_flag("ENGRAM_HOST_PLAN_LISTS");
  if (host_lists) return with_host_lists(std::move(plan));
  return plan;
}

std::optional<KeepPlan> EpiCachePolicy::before_decode_step(const WorkingSetInfo& ws) {
  const int64_t limit = ws.fixed_capacity ? std::max(budget(), ws.capacity) : budget();
  if (budget() <= 0 || ws.tokens + 1 <= limit) return std::nullopt;
  return shrink(ws, budget() - decode_slack());
}

std::string apply_layer_calibration(EpiCachePolicy& policy,
                                    const std::optional<LayerCalibration>& calibration,
                                    int64_t most_slots) {
  if (!policy.options().calibrated) return {};
  if (!calibration) {
    return "epicache: this model has no layer calibration (run engram-cli calibrate --model DIR); "
           "uniform layer budgets";
  }
  const int64_t m = policy.budget();
  std::vector<int64_t> budgets = allocate_layer_budgets(
      calibration->key_cosine, m, calibration->alpha, std::max(m, most_slots));
  const auto [low, high] = std::minmax_element(budgets.begin(), budgets.end());
  const int64_t slots = *high;
  std::string note = "epicache: calibrated layer budgets " + std::to_string(*low) + ".." +
                     std::to_string(slots) + " tokens (" + std::to_string(budgets.size()) +
                     " layers x " + std::to_string(m) + " in all); " + std::to_string(slots) +
                     " slots per layer";
  policy.set_layer_budgets(std::move(budgets));
  policy.set_budget(slots);
  return note;
}

}  // namespace engram
