#include "core/engine/chat_session.h"

#include <stdexcept>
#include <string>

#include "core/model/model_error.h"
#include "core/tokenizer/stop_strings.h"
#include "core/tokenizer/token_stream.h"
#include "gpu/device_timeline.h"

namespace engram {

ChatSession::ChatSession(LoadedModel& model, std::string system_prompt) : model_(model) {
  if (!model.tokenizer || !model.chat_template) {
    throw ModelError(model.name, "chat needs a tokenizer.model in the model folder");
  }
  if (!system_prompt.empty()) messages_.push_back({"system", std::move(system_prompt)});
  const ModelConfig& c = model.config;
  cache_ = std::make_unique<KvCache>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim}, 1, 256,
                                     model.decoder->dtype(), model.decoder->device());
}

void ChatSession::set_history(std::vector<ChatMessage> messages) {
  messages_ = std::move(messages);
}

void ChatSession::adopt_cache(std::unique_ptr<KvCache> cache, std::vector<int64_t> cached_ids) {
  const KvCacheShape want = cache_->shape();
  const KvCacheShape got = cache ? cache->shape() : KvCacheShape{};
  const auto problem = [&]() -> std::string {
    if (!cache) return "no cache";
    if (got.layers != want.layers || got.kv_heads != want.kv_heads ||
        got.head_dim != want.head_dim) {
      return "shape [layers " + std::to_string(got.layers) + ", kv heads " +
             std::to_string(got.kv_heads) + ", head dim " + std::to_string(got.head_dim) +
             "], the model needs [" + std::to_string(want.layers) + ", " +
             std::to_string(want.kv_heads) + ", " + std::to_string(want.head_dim) + "]";
    }
    if (cache->dtype() != cache_->dtype() || cache->device() != cache_->device()) {
      return std::string("dtype/device ") + c10::toString(cache->dtype()) + " " +
             cache->device().str() + ", the model runs " + c10::toString(cache_->dtype()) + " " +
             cache_->device().str();
    }
    if (cache->batch() != 1 || cache->lengths()[0] != static_cast<int64_t>(cached_ids.size())) {
      return "a cache of " + std::to_string(cache->lengths()[0]) + " tokens for " +
             std::to_string(cached_ids.size()) + " token ids";
    }
    if (static_cast<int64_t>(cached_ids.size()) + 1 > model_.config.max_positions) {
      return std::to_string(cached_ids.size()) + " tokens exceed the model's " +
             std::to_string(model_.config.max_positions) + " positions";
    }
    return {};
  }();
  if (!problem.empty()) throw std::invalid_argument("ChatSession::adopt_cache: " + problem);
  cache_ = std::move(cache);
  cached_ids_ = std::move(cached_ids);
}

int64_t ChatSession::prefill_history(int64_t chunk) {
  if (messages_.empty()) return 0;
  const std::vector<int32_t> rendered =
      model_.chat_template->encode(*model_.tokenizer, messages_, /*add_generation_prompt=*/false);
  const std::vector<int64_t> ids(rendered.begin(), rendered.end());
  if (static_cast<int64_t>(ids.size()) + 1 > model_.config.max_positions) {
    throw std::out_of_range("the history has " + std::to_string(ids.size()) +
                            " tokens; the model's maximum is " +
                            std::to_string(model_.config.max_positions) + " positions");
  }
  size_t common = 0;
  while (common < cached_ids_.size() && common < ids.size() && cached_ids_[common] == ids[common])
    ++common;
  cache_->truncate(0, static_cast<int64_t>(common));
  cached_ids_.resize(common);
  const std::vector<int64_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
  if (fresh.empty()) return 0;
  gpu::DeviceTimeline timeline(cache_->device());
  (void)prefill(*model_.decoder, *cache_, fresh, chunk, timeline, nullptr);
  cached_ids_ = ids;
  return static_cast<int64_t>(fresh.size());
}

ChatReply ChatSession::reply(const std::string& user_text, const GenerationOptions& options,
                             const std::function<void(const std::string&)>& on_text) {
  messages_.push_back({"user", user_text});
  try {
    return generate_reply(options, on_text);
  } catch (...) {
    messages_.pop_back();  // a failed turn leaves the history as it was
    throw;
  }
}

ChatReply ChatSession::regenerate(const GenerationOptions& options,
                                  const std::function<void(const std::string&)>& on_text) {
  if (messages_.empty() || messages_.back().role != "assistant") {
    throw std::logic_error("regenerate: the last message is not a reply");
  }
  ChatMessage dropped = messages_.back();
  messages_.pop_back();
  try {
    return generate_reply(options, on_text);
  } catch (...) {
    messages_.push_back(std::move(dropped));
    throw;
  }
}

ChatReply ChatSession::generate_reply(const GenerationOptions& options,
                                      const std::function<void(const std::string&)>& on_text) {
  const Tokenizer& tok = *model_.tokenizer;
  const ChatTemplate& tmpl = *model_.chat_template;
  const std::vector<int32_t> rendered = tmpl.encode(tok, messages_, /*add_generation_prompt=*/true);
  const std::vector<int64_t> prompt(rendered.begin(), rendered.end());

  // Reuse the cached prefix; at least one token must be computed to get logits.
  size_t common = 0;
  while (common < cached_ids_.size() && common < prompt.size() &&
         cached_ids_[common] == prompt[common]) {
    ++common;
  }
  if (common == prompt.size()) --common;
  cache_->truncate(0, static_cast<int64_t>(common));
  cached_ids_.resize(common);

  // Never sample an id the tokenizer cannot turn into text (a padded embedding, or a shape
  // benchmarked with a smaller tokenizer).
  GenerationOptions limited = options;
  if (tok.vocab_size() < model_.config.vocab_size) limited.sampling.vocab_limit = tok.vocab_size();

  ChatReply reply;
  reply.reused_tokens = static_cast<int64_t>(common);
  // ids -> text -> text before any stop string -> the reply without the format's delimiters
  // (engram's quotes), which is what the view shows and the history keeps.
  TokenStream stream(tok);
  StopStringMatcher stops(tmpl.stop_strings());
  ReplyDelimiterStripper delimiters(tmpl.reply_delimiters());
  bool stopped = false;
  auto show = [&](const std::string& text) {
    reply.text += text;
    if (on_text && !text.empty()) on_text(text);
  };
  auto emit = [&](const std::string& piece) {
    if (piece.empty() || stopped) return;
    show(delimiters.push(stops.push(piece)));
    if (stops.stopped()) stopped = true;
  };
  const std::vector<int64_t> fresh(prompt.begin() + static_cast<std::ptrdiff_t>(common),
                                   prompt.end());
  reply.generation =
      generate(*model_.decoder, *cache_, cached_ids_, fresh, limited, [&](int64_t token) {
        emit(stream.push(static_cast<int32_t>(token)));
        return !stopped;
      });
  emit(stream.finish());
  if (!stopped) show(delimiters.push(stops.finish()));
  show(delimiters.finish());
  // The cache now holds the prompt and the generated tokens that were fed back.
  cached_ids_ = prompt;
  const int64_t fed = cache_->lengths()[0] - static_cast<int64_t>(prompt.size());
  cached_ids_.insert(cached_ids_.end(), reply.generation.tokens.begin(),
                     reply.generation.tokens.begin() + std::max<int64_t>(0, fed));
  messages_.push_back({"assistant", reply.text});
  return reply;
}

}  // namespace engram
