// Chat templates: a conversation to the exact token ids a model family was trained on. Special
// tokens (BOS/EOS, ChatML's <|im_start|>/<|im_end|> when the vocabulary has them) are inserted as
// ids, never spelled as text, so that user text containing "<s>" cannot forge one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatTemplateKind {
  kLlama2,  // <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
  kChatML,  // <|im_start|>{role}\n{content}<|im_end|>\n
  kPlain,   // <s>### System:\n{..}\n\n### User:\n{..}\n\n### Assistant:\n{..}\n\n</s>
};

// "llama2", "chatml" or "plain"; throws std::invalid_argument otherwise.
ChatTemplateKind parse_chat_template_kind(std::string_view name);
std::string_view chat_template_kind_name(ChatTemplateKind kind);

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateKind kind) : kind_(kind) {}
  ChatTemplateKind kind() const { return kind_; }

  // Token ids for the conversation; with add_generation_prompt the ids end where the assistant's
  // reply starts. Throws std::invalid_argument for an unknown role (and, for Llama-2, for user and
  // assistant turns that do not alternate).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) const;
  // The same conversation as text, BOS/EOS shown as "<s>"/"</s>" (for display and debugging).
  std::string render_text(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const;
  // Strings that end a reply besides EOS.
  std::vector<std::string> stop_strings() const;

  // From the model folder: tokenizer_config.json's chat_template, then the vocabulary, then
  // config.json's model_type; kPlain when nothing matches. Throws ModelError for unreadable JSON.
  static ChatTemplateKind detect(const std::filesystem::path& model_dir,
                                 const Tokenizer& tokenizer);

 private:
  ChatTemplateKind kind_;
};

}  // namespace engram
