#include "core/policies/louiskv_policy.h"

#include <algorithm>
#include <cmath>

#include "gpu/key_kmeans.h"
#include "gpu/louiskv_scoring.h"

namespace engram {

std::pair<at::Tensor, at::Tensor> cluster_keys(const at::Tensor& keys, int64_t clusters,
                                               int64_t iterations, int64_t moved_permille,
                                               int64_t* rounds, const at::Tensor& visible) {
  const int64_t n = keys.size(1), d = keys.size(2);
  clusters = std::clamp<int64_t>(clusters, 1, n);
  at::Tensor centroids;
  if (!visible.defined()) {
    // Start from keys spread evenly over the prompt: every region of the text gets a centroid.
    const at::Tensor start =
        at::linspace(0, static_cast<double>(n - 1), clusters, keys.options().dtype(at::kDouble))
            .round()
            .to(at::kLong);
    centroids = keys.index_select(1, start).to(at::kFloat);
  } else {
    // The same over each head's visible keys: the slots they are in (stable: visible ones first,
    // in slot order), then evenly spaced picks among the first count of them.
    const at::Tensor shown =
        std::get<1>(visible.logical_not().to(at::kInt).sort(/*stable=*/true, 1, false));
    const at::Tensor last = (visible.sum(1, true) - 1).clamp_min(0).to(at::kDouble);
    const at::Tensor picks =
        (at::linspace(0, 1, clusters, last.options()).view({1, -1}) * last).round().to(at::kLong);
    const at::Tensor start = shown.gather(1, picks);
    centroids = keys.gather(1, start.unsqueeze(-1).expand({-1, -1, d})).to(at::kFloat);
  }
  centroids = centroids / centroids.norm(2, -1, true).clamp_min(1e-12);
  // Hidden keys go to one more cluster, updated with the others and dropped.
  const at::Tensor hidden = visible.defined() ? visible.logical_not() : at::Tensor();
  const auto assign = [&](const at::Tensor& c) {
    const at::Tensor a = gpu::kmeans_assign(keys, c);
    return hidden.defined() ? a.masked_fill(hidden, clusters) : a;
  };
  const auto update = [&](const at::Tensor& a, const at::Tensor& c) {
    if (!hidden.defined()) return gpu::kmeans_update(keys, a, c);
    return gpu::kmeans_update(keys, a, at::cat({c, c.narrow(1, 0, 1)}, 1))
        .narrow(1, 0, clusters)
        .contiguous();
  };
  at::Tensor assignment = assign(centroids);
  // One count crosses to the host per round either way (equal() synchronises too).
  const int64_t keys_clustered =
      hidden.defined() ? visible.sum().item<int64_t>() : assignment.numel();
  const int64_t allowed = keys_clustered * std::max<int64_t>(0, moved_permille) / 1000;
  int64_t ran = 0;
  for (int64_t it = 0; it < iterations; ++it) {
    centroids = update(assignment, centroids);
    at::Tensor next = assign(centroids);
    ++ran;
    const int64_t moved = next.ne(assignment).sum().item<int64_t>();
    assignment = next;
    if (moved <= allowed) break;
  }
  if (rounds) *rounds = ran;
  return {assignment, centroids};
}

PromptUnits units_from_assignment(const at::Tensor& keys, const at::Tensor& assignment,
                                  int64_t clusters) {
  const int64_t heads = keys.size(0), d = keys.size(2);
  PromptUnits units;
  // Stable sort by cluster: a cluster's tokens stay in text order inside its unit.
  units.order = std::get<1>(assignment.sort(/*stable=*/true, /*dim=*/1, /*descending=*/false));
  units.sizes = at::zeros({heads, clusters}, assignment.options());
  units.sizes.scatter_add_(1, assignment, at::ones_like(assignment));
  units.offsets = units.sizes.cumsum(1) - units.sizes;
  at::Tensor sums = at::zeros({heads, clusters, d}, keys.options().dtype(at::kFloat));
  sums.scatter_add_(1, assignment.unsqueeze(-1).expand({-1, -1, d}), keys.to(at::kFloat));
  units.index = sums / units.sizes.unsqueeze(-1).clamp_min(1).to(at::kFloat);
  return units;
}

LouisKvPolicy::LouisKvPolicy(LouisKvOptions options, RetrievalSettings settings)
    : options_(options), tau_(options.tau_by_shape ? kLongOutputTau : options.tau) {
  settings_ = settings;
}

std::string LouisKvPolicy::spec() const {
  // Without `tau=` τ follows each request's shape.
  std::string s =
      "louiskv:" +
      (options_.tau_by_shape ? std::string()
                             : "tau=" + std::to_string(std::lround(options_.tau * 100)) + ",") +
      "sinks=" + std::to_string(settings_.sinks) + ",window=" + std::to_string(settings_.window) +
      ",budget=" + std::to_string(settings_.budget);
  if (options_.cluster_tokens != 16) s += ",cluster=" + std::to_string(options_.cluster_tokens);
  if (options_.stride > 0) s += ",stride=" + std::to_string(options_.stride);
  if (options_.min_segment_tokens != LouisKvOptions{}.min_segment_tokens)
    s += ",segment=" + std::to_string(options_.min_segment_tokens);
  if (options_.moved_permille != LouisKvOptions{}.moved_permille)
    s += ",moved=" + std::to_string(options_.moved_permille);
  if (settings_.full_layers != 2) s += ",full_layers=" + std::to_string(settings_.full_layers);
  if (settings_.prompt_by_decode) s += ",prompt=1";
  if (settings_.offload >= 0) s += ",offload=" + std::to_string(settings_.offload);
  if (!settings_.overlap_prefill) s += ",overlap=0";
  if (settings_.index_on_host) s += ",host_index=1";
  if (options_.rate_percent > 0) s += ",rate=" + std::to_string(options_.rate_percent);
  return s;
}

std::unique_ptr<RetrievalPolicy> LouisKvPolicy::clone() const {
  auto copy = std::make_unique<LouisKvPolicy>(*this);
  // The device state is updated in place: a clone gets its own.
  for (auto* states : {&copy->previous_q_, &copy->layer_tau_}) {
    for (at::Tensor& t : *states)
      if (t.defined()) t = t.clone();
  }
  return copy;
}

void LouisKvPolicy::begin_decode(int64_t layers, int64_t prompt_tokens, int64_t max_new_tokens) {
  if (options_.tau_by_shape) {
    tau_ = prompt_tokens >= kLongInputRatio * max_new_tokens ? kLongInputTau : kLongOutputTau;
  }
  previous_q_.assign(layers, at::Tensor());
  // Each layer's own τ carries over to the next request (a chat's next turn): how often a layer's
  // queries turn is the model's, and a short request would otherwise spend itself settling.
  if (layer_tau_.size() != static_cast<size_t>(layers)) {
    layer_tau_.assign(layers, at::Tensor());
    host_tau_.assign(layers, std::numeric_limits<float>::quiet_NaN());
  }
  last_tau_.assign(layers, std::numeric_limits<float>::quiet_NaN());
  similarity_.assign(layers, {});
  last_similarity_.assign(layers, std::numeric_limits<float>::quiet_NaN());
}

PromptUnits LouisKvPolicy::prompt_units(int64_t /*layer*/, const at::Tensor& keys) {
  const int64_t n = keys.size(1);
  const int64_t clusters = std::max<int64_t>(
      1, (n + options_.cluster_tokens - 1) / std::max<int64_t>(1, options_.cluster_tokens));
  int64_t rounds = 0;
  const at::Tensor assignment =
      cluster_keys(keys, clusters, options_.iterations, options_.moved_permille, &rounds).first;
  PromptUnits units = units_from_assignment(keys, assignment, std::min(clusters, n));
  units.kmeans_rounds = rounds;
  return units;
}

PromptUnits LouisKvPolicy::ragged_prompt_units(int64_t /*layer*/, const at::Tensor& keys,
                                               const at::Tensor& visible) {
  const int64_t most = visible.sum(1).max().item<int64_t>();
  const int64_t clusters = std::max<int64_t>(
      1, (most + options_.cluster_tokens - 1) / std::max<int64_t>(1, options_.cluster_tokens));
  int64_t rounds = 0;
  const at::Tensor assignment =
      cluster_keys(keys, clusters, options_.iterations, options_.moved_permille, &rounds, visible)
          .first;
  const int64_t k = std::min(clusters, keys.size(1));
  // Cluster k holds the hidden keys: last in each head's order, and no unit.
  PromptUnits units = units_from_assignment(keys, assignment, k + 1);
  units.sizes = units.sizes.narrow(1, 0, k).contiguous();
  units.offsets = units.offsets.narrow(1, 0, k).contiguous();
  units.index = units.index.narrow(1, 0, k).contiguous();
  units.kmeans_rounds = rounds;
  return units;
}

at::Tensor LouisKvPolicy::unit_index(const at::Tensor& keys) const {
  return keys.to(at::kFloat).mean(1);
}

bool LouisKvPolicy::retrieve(int64_t layer, int64_t step, const at::Tensor& q) {
  if (options_.stride > 0) {
    // No r_t: a fixed stride is decided on the host, without a device sync per layer.
    return step == 0 || step % options_.stride == 0;
  }
  // The same computation as the recorded step's (gpu::louiskv_decide), so that both paths take
  // the same decisions to the last bit of r_t.
  at::Tensor decision = at::empty({2}, q.options().dtype(at::kFloat));
  retrieve_on_device(layer, at::full({1}, step, q.options().dtype(at::kLong)), q, decision);
  const at::Tensor decided = decision.cpu();
  similarity_seen(layer, step, decided[1].item<float>(), decided[0].item<float>() > 0);
  return decided[0].item<float>() > 0;
}

void LouisKvPolicy::retrieve_on_device(int64_t layer, const at::Tensor& step, const at::Tensor& q,
                                       at::Tensor& decision) {
  at::Tensor& previous = previous_q_.at(layer);
  // The first call allocates the layer's previous queries (zeros: step 0 retrieves anyway); every
  // later one updates them in place, so a recorded step replays the same buffers.
  if (!previous.defined()) previous = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  if (options_.rate_percent == 0 || options_.stride > 0) {
    gpu::louiskv_decide(q, previous, step, tau_, options_.stride, decision);
    return;
  }
  at::Tensor& threshold = layer_tau_.at(layer);
  if (!threshold.defined() || threshold.device() != q.device()) {
    threshold = at::full({1}, tau_, q.options().dtype(at::kFloat));
    host_tau_.at(layer) = static_cast<float>(tau_);
  }
  const gpu::LayerTau own{threshold, tau_up(), tau_down()};
  gpu::louiskv_decide(q, previous, step, tau_, options_.stride, decision, &own);
}

float LouisKvPolicy::tau_up() const {
  return static_cast<float>(LouisKvOptions::kRateGain * double(options_.rate_percent) / 100.0);
}

float LouisKvPolicy::tau_down() const {
  return static_cast<float>(LouisKvOptions::kRateGain *
                            (double(options_.rate_percent) / 100.0 - 1.0));
}

double LouisKvPolicy::layer_tau(int64_t layer) const {
  const at::Tensor& own = layer_tau_.at(layer);
  return own.defined() ? own.item<float>() : tau_;
}

void LouisKvPolicy::similarity_seen(int64_t layer, int64_t step, float similarity, bool retrieved) {
  // retrieve() logs r_t of adaptive steps after the first; so does this.
  const bool compared = options_.stride == 0 && step > 0;
  if (compared) similarity_.at(layer).push_back(similarity);
  last_similarity_.at(layer) = compared ? similarity : std::numeric_limits<float>::quiet_NaN();
  if (options_.rate_percent == 0 || options_.stride > 0) return;
  // The device moved the layer's τ after a compared step; the host replays the same f32 add.
  float& next = host_tau_.at(layer);
  last_tau_.at(layer) = compared ? next : std::numeric_limits<float>::quiet_NaN();
  if (compared)
    next = std::fmin(std::fmax(next + (retrieved ? tau_down() : tau_up()), -1.f),
                     gpu::kLayerTauCeiling);
}

at::Tensor LouisKvPolicy::score(const at::Tensor& q, const at::Tensor& index,
                                const at::Tensor& live, const at::Tensor& enabled) const {
  return gpu::louiskv_scores(q, index, live, enabled);
}

}  // namespace engram
