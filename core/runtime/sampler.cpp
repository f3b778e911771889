#include "core/runtime/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <stdexcept>

namespace engram {

Sampler::Sampler(SamplingOptions options)
    : options_(options), generator_(at::detail::createCPUGenerator(options.seed)) {
  if (options.temperature < 0) throw std::invalid_argument("temperature must be >= 0");
  if (options.top_p <= 0 || options.top_p > 1)
    throw std::invalid_argument("top-p must be in (0, 1]");
  if (options.top_k < 0) throw std::invalid_argument("top-k must be >= 0");
  if (options.repetition_penalty <= 0)
    throw std::invalid_argument("repetition penalty must be > 0");
}

int64_t Sampler::next(const at::Tensor& logits_all, const std::vector<int64_t>& history) {
  at::Tensor logits_in = logits_all.reshape({-1});
  if (options_.vocab_limit > 0 && options_.vocab_limit < logits_in.size(0))
    logits_in = logits_in.narrow(0, 0, options_.vocab_limit);
  if (options_.temperature == 0.0 && options_.repetition_penalty == 1.0) {
    // Greedy: argmax where the logits are, so only one id crosses to the host.
    return logits_in.argmax().item<int64_t>();
  }
  at::Tensor logits = logits_in.to(at::kCPU, at::kFloat, false, /*copy=*/true);
  if (options_.repetition_penalty != 1.0 && !history.empty()) {
    const at::Tensor seen = std::get<0>(at::_unique(at::tensor(history, at::kLong)));
    at::Tensor vals = logits.index_select(0, seen);
    vals =
        at::where(vals > 0, vals / options_.repetition_penalty, vals * options_.repetition_penalty);
    logits.index_copy_(0, seen, vals);
  }
  if (options_.temperature == 0.0) return logits.argmax().item<int64_t>();

  logits = logits / options_.temperature;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (options_.top_k > 0 && options_.top_k < logits.numel()) {
    const float kth = std::get<0>(logits.topk(options_.top_k)).min().item<float>();
    logits.masked_fill_(logits < kth, neg_inf);
  }
  if (options_.top_p < 1.0) {
    auto [sorted, order] = logits.sort(/*dim=*/0, /*descending=*/true);
    at::Tensor cumulative = at::softmax(sorted, 0).cumsum(0);
    // Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    at::Tensor drop = (cumulative - at::softmax(sorted, 0)) >= options_.top_p;
    sorted.masked_fill_(drop, neg_inf);
    logits = at::empty_like(logits).index_copy_(0, order, sorted);
  }
  at::Tensor probs = at::softmax(logits, 0);
  return at::multinomial(probs, 1, /*replacement=*/false, generator_).item<int64_t>();
}

}  // namespace engram
