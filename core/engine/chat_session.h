// A conversation with a loaded model. The session keeps the KV cache of everything said so far,
// so a new turn prefills only its own tokens (the cached ids are compared with the newly
// rendered prompt and the cache is cut back to the common prefix: regenerate and edits work
// the same way). Replies stream as text that never splits a UTF-8 character or shows a partial
// stop string; the template's reply delimiters (engram's quotes) are neither shown nor kept.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"

namespace engram {

struct ChatReply {
  std::string text;
  GenerationResult generation;
  int64_t reused_tokens = 0;  // prompt tokens served from the session's cache
};

class ChatSession {
 public:
  // Throws ModelError when the model has no tokenizer or chat template.
  explicit ChatSession(LoadedModel& model, std::string system_prompt = {});

  // Adds the user's message, generates the reply, adds it to the history and returns it.
  // `on_text` receives the reply's text as it is generated.
  ChatReply reply(const std::string& user_text, const GenerationOptions& options,
                  const std::function<void(const std::string&)>& on_text);
  // Drops the last assistant reply and generates it again.
  ChatReply regenerate(const GenerationOptions& options,
                       const std::function<void(const std::string&)>& on_text);

  // Replaces the history (e.g. a stored conversation); the cache keeps the common prefix.
  void set_history(std::vector<ChatMessage> messages);
  const std::vector<ChatMessage>& history() const { return messages_; }
  const KvCache& cache() const { return *cache_; }
  int64_t cached_tokens() const { return static_cast<int64_t>(cached_ids_.size()); }
  // The tokens whose KV is in cache(), in order: prompts and the generated tokens fed back,
  // which need not equal a re-tokenization of the reply text (a store saves them with the KV).
  const std::vector<int64_t>& cached_ids() const { return cached_ids_; }
  const LoadedModel& model() const { return model_; }

  // Installs KV computed earlier for this model (a restored conversation): row 0 of `cache`
  // holds the KV of `cached_ids`. The next reply reuses it like its own cache. Throws
  // std::invalid_argument when layers, heads, head size, dtype, device or length do not fit;
  // the session is then unchanged.
  void adopt_cache(std::unique_ptr<KvCache> cache, std::vector<int64_t> cached_ids);
  // Prefills the rendered history (without a generation prompt) past the cached prefix, so the
  // next reply computes only its own turn; returns the tokens prefilled (a rebuild from text).
  int64_t prefill_history(int64_t chunk = 512);

 private:
  ChatReply generate_reply(const GenerationOptions& options,
                           const std::function<void(const std::string&)>& on_text);

  LoadedModel& model_;
  std::vector<ChatMessage> messages_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int64_t> cached_ids_;  // the tokens whose KV is in cache_, in order
};

}  // namespace engram
