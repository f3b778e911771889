#include "core/engine/line_completion.h"

#include "core/engine/generator.h"
#include "core/model/model_error.h"
#include "core/policies/full_policy.h"
#include "core/tokenizer/token_stream.h"

namespace engram {

LineCompletion complete_line(const LoadedModel& model, const std::string& prompt,
                             int64_t max_new_tokens, MemoryPolicy* policy) {
  if (!model.tokenizer)
    throw ModelError(model.name, "a line completion needs tokenizer.model or tokenizer.json");
  std::vector<int64_t> ids;
  if (model.tokenizer->bos_id() >= 0) ids.push_back(model.tokenizer->bos_id());
  for (int32_t id : model.tokenizer->encode(prompt))
    ids.push_back(id);
  const ModelConfig& c = model.config;
  FullPolicy full;
  MemoryPolicy& used = policy ? *policy : full;
  constexpr int64_t kBlock = 512;
  KvWorkingSet ws({c.num_layers, c.num_kv_heads, c.head_dim},
                  used.budget() > 0 ? used.budget() + kBlock : 0, model.decoder->dtype(),
                  model.decoder->device(), c.max_positions);
  GenerationOptions options;  // greedy
  options.max_new_tokens = max_new_tokens;
  options.sampling.vocab_limit = model.tokenizer->vocab_size();
  TokenStream stream(*model.tokenizer);
  std::string text;
  options.prefill_chunk = kBlock;
  const GenerationResult r = generate(*model.decoder, used, ws, {}, ids, options, [&](int64_t t) {
    text += stream.push(static_cast<int32_t>(t));
    return text.find('\n') == std::string::npos;
  });
  if (r.stop_reason != "stop") text += stream.finish();
  text = text.substr(0, text.find('\n'));
  const auto first = text.find_first_not_of(" \t");
  const auto last = text.find_last_not_of(" \t\r");
  LineCompletion out;
  out.text = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  out.time_to_first_token_ms = r.time_to_first_token_ms;
  out.prompt_tokens = static_cast<int64_t>(ids.size());
  out.peak_kv_tokens = r.peak_kv_tokens;
  return out;
}

}  // namespace engram
