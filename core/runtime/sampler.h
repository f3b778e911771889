// Turns logits into the next token: greedy, temperature, top-k, top-p, repetition penalty.
// Sampling draws from a CPU generator seeded per request, on logits copied to the CPU, so the
// same input and seed give the same output on every device.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace engram {

struct SamplingOptions {
  double temperature = 0.0;         // 0 = greedy
  int64_t top_k = 0;                // 0 = off
  double top_p = 1.0;               // 1 = off
  double repetition_penalty = 1.0;  // 1 = off (CTRL-style, as transformers)
  uint64_t seed = 0;
  // Sample only ids below this (0 = every row of the logits): a model's embedding often has
  // more rows than its tokenizer has pieces (padding), and an id past the tokenizer has no text.
  int64_t vocab_limit = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplingOptions options);
  // logits: [vocab] (any device, any float dtype). `history` is every token so far (prompt and
  // generated) for the repetition penalty.
  int64_t next(const at::Tensor& logits, const std::vector<int64_t>& history);
  const SamplingOptions& options() const { return options_; }

 private:
  SamplingOptions options_;
  at::Generator generator_;
};

}  // namespace engram
