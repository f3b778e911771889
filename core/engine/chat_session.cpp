#include "core/engine/chat_session.h"

#include <stdexcept>
#include <string>

#include "core/model/model_error.h"
#include "core/policies/policy_registry.h"
#include "core/tokenizer/stop_strings.h"
#include "core/tokenizer/token_stream.h"
#include "gpu/device_timeline.h"

namespace engram {
ChatSession::ChatSession(LoadedModel& model, std::string system_prompt, PolicyChoice choice)
    : model_(model), choice_(std::move(choice)) {
  if (!model.tokenizer || !model.chat_template) {
    throw ModelError(model.name,
                     "chat needs tokenizer.model or tokenizer.json in the model folder");
  }
  if (!system_prompt.empty()) messages_.push_back({"system", std::move(system_prompt)});
  const ModelConfig& c = model.config;
  const int64_t block = session_prefill_block(c.max_positions);
  policy_ = make_policy(choice_.spec, choice_.kv_budget, c.max_positions, block, &policy_note_);
  const int64_t capacity = policy_->budget() > 0 ? policy_->budget() + block : 0;
  ws_ = std::make_unique<KvWorkingSet>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim},
                                       capacity, model.decoder->dtype(), model.decoder->device(),
                                       c.max_positions);
}

void ChatSession::set_history(std::vector<ChatMessage> messages) {
  messages_ = std::move(messages);
}

void ChatSession::keep_for_store(bool keep) {
  ws_->set_capture(keep);
}

void ChatSession::adopt_working_set(const KvCache& cache, const at::Tensor& slot_stream,
                                    std::vector<int64_t> stream_ids, int64_t stored_from) {
  if (cache.lengths()[0] > 0 && stream_ids.empty())
    throw std::invalid_argument("ChatSession::adopt_working_set: KV without token ids");
  ws_->adopt(cache, slot_stream, static_cast<int64_t>(stream_ids.size()));
  ws_->capture_from(std::min<int64_t>(stored_from, static_cast<int64_t>(stream_ids.size())));
  cached_ids_ = std::move(stream_ids);
}

void ChatSession::adopt_cache(std::unique_ptr<KvCache> cache, std::vector<int64_t> cached_ids) {
  if (!cache) throw std::invalid_argument("ChatSession::adopt_cache: no cache");
  if (cache->lengths()[0] != static_cast<int64_t>(cached_ids.size())) {
    throw std::invalid_argument("ChatSession::adopt_cache: a cache of " +
                                std::to_string(cache->lengths()[0]) + " tokens for " +
                                std::to_string(cached_ids.size()) + " token ids");
  }
  if (policy_->budget() == 0 &&
      static_cast<int64_t>(cached_ids.size()) + 1 > model_.config.max_positions) {
    throw std::invalid_argument("ChatSession::adopt_cache: " + std::to_string(cached_ids.size()) +
                                " tokens exceed the model's " +
                                std::to_string(model_.config.max_positions) + " positions");
  }
  const int64_t n = cache->lengths()[0];
  adopt_working_set(*cache, at::arange(n, at::kLong).view({1, 1, n}), std::move(cached_ids), n);
}

size_t ChatSession::sync_prefix(const std::vector<int64_t>& ids, size_t keep_last, bool* rebuilt) {
  size_t common = 0;
  while (common < cached_ids_.size() && common < ids.size() && cached_ids_[common] == ids[common])
    ++common;
  if (common + keep_last > ids.size()) common = ids.size() - keep_last;
  if (!ws_->truncate(static_cast<int64_t>(common))) {
    // The cut falls inside KV the policy compacted: start again from the text.
    ws_->clear();
    common = 0;
    if (rebuilt) *rebuilt = true;
  }
  cached_ids_.resize(common);
  return common;
}

int64_t ChatSession::prefill_history(int64_t chunk) {
  if (messages_.empty()) return 0;
  const std::vector<int32_t> rendered =
      model_.chat_template->encode(*model_.tokenizer, messages_, /*add_generation_prompt=*/false);
  const std::vector<int64_t> ids(rendered.begin(), rendered.end());
  if (policy_->budget() == 0 &&
      static_cast<int64_t>(ids.size()) + 1 > model_.config.max_positions) {
    throw std::out_of_range("the history has " + std::to_string(ids.size()) +
                            " tokens; the model's maximum is " +
                            std::to_string(model_.config.max_positions) + " positions");
  }
  const size_t common = sync_prefix(ids, 0, nullptr);
  const std::vector<int64_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
  if (fresh.empty()) return 0;
  gpu::DeviceTimeline timeline(ws_->cache().device());
  (void)prefill(*model_.decoder, *policy_, *ws_, fresh, chunk, timeline, nullptr);
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

std::string ChatSession::memory_note(const ChatReply& reply) const {
  if (reply.evicted_tokens == 0 && !reply.rebuilt) return {};
  std::string note =
      "memory (" + policy_->spec() + ", budget " + std::to_string(policy_->budget()) + "): ";
  if (reply.rebuilt) note += "rebuilt from the text; ";
  if (reply.evicted_tokens > 0)
    note += std::to_string(reply.evicted_tokens) + " tokens moved out of attention; ";
  note += "attention holds " + std::to_string(reply.attention_tokens) + " of " +
          std::to_string(reply.stream_tokens) + " tokens; the text is kept whole";
  return note;
}

ChatReply ChatSession::generate_reply(const GenerationOptions& options,
                                      const std::function<void(const std::string&)>& on_text) {
  const Tokenizer& tok = *model_.tokenizer;
  const ChatTemplate& tmpl = *model_.chat_template;
  const std::vector<int32_t> rendered = tmpl.encode(tok, messages_, /*add_generation_prompt=*/true);
  const std::vector<int64_t> prompt(rendered.begin(), rendered.end());

  ChatReply reply;
  // Reuse the cached prefix; at least one token must be computed to get logits.
  const size_t common = sync_prefix(prompt, 1, &reply.rebuilt);

  // Never sample an id the tokenizer cannot turn into text (a padded embedding, or a shape
  // benchmarked with a smaller tokenizer).
  GenerationOptions limited = options;
  if (tok.vocab_size() < model_.config.vocab_size) limited.sampling.vocab_limit = tok.vocab_size();

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
  try {
    reply.generation =
        generate(*model_.decoder, *policy_, *ws_, cached_ids_, fresh, limited, [&](int64_t token) {
          emit(stream.push(static_cast<int32_t>(token)));
          return !stopped;
        });
  } catch (...) {
    // What was computed before the failure is not a prefix we can name: start over next time.
    if (ws_->stream_tokens() != static_cast<int64_t>(cached_ids_.size())) {
      ws_->clear();
      cached_ids_.clear();
    }
    throw;
  }
  emit(stream.finish());
  if (!stopped) show(delimiters.push(stops.finish()));
  show(delimiters.finish());
  // The working set now holds the prompt and the generated tokens that were fed back.
  cached_ids_ = prompt;
  const int64_t fed = ws_->stream_tokens() - static_cast<int64_t>(prompt.size());
  cached_ids_.insert(cached_ids_.end(), reply.generation.tokens.begin(),
                     reply.generation.tokens.begin() + std::max<int64_t>(0, fed));
  messages_.push_back({"assistant", reply.text});
  reply.evicted_tokens = reply.generation.evicted_tokens;
  reply.attention_tokens = ws_->tokens();
  reply.stream_tokens = ws_->stream_tokens();
  reply.memory_note = memory_note(reply);
  return reply;
}

}  // namespace engram
