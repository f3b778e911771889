// Chat templates: a conversation to the exact token ids a model family was trained on. Special
// tokens (BOS/EOS, ChatML's <|im_start|>/<|im_end|> when the vocabulary has them) are inserted as
// ids, never spelled as text, so that user text containing "<s>" cannot forge one. A template may
// also wrap each reply in delimiters of its format (engram's quotes): the model writes them, the
// reply shown and kept in the history goes without them, and rendering puts them back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
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
  // <s>Session 1 (February 11, 2024)\nUser said, "{user}"\nAssistant said, "{assistant}"\n:
  // Engram's conversation corpus (core/env/conversation_format.h), what engram-tiny learned.
  kEngram,
  // Hugging Face families (chat_template_families.cpp has each one's rules):
  kLlama3,   // <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
  kLlama31,  // Llama-3.1/3.2/3.3: kLlama3 with a system header "Cutting Knowledge Date: ..."
  kQwen25,   // ChatML with Qwen's default system turn
  kQwen3,    // ChatML, thinking off: the generation prompt ends "<think>\n\n</think>\n\n"
  kMistral,  // Nemo / v3 tekken: <s>[INST]{user}[/INST]{assistant}</s>
};

// "llama2", "chatml", "plain", "engram", "llama3", "llama3.1", "qwen2.5", "qwen3" or "mistral";
// throws std::invalid_argument otherwise.
ChatTemplateKind parse_chat_template_kind(std::string_view name);
std::string_view chat_template_kind_name(ChatTemplateKind kind);

// Text that a template's format puts around every reply, written by the model but not part of
// what it says: engram-tiny answers `"reply"` + EOS. Empty for templates without any.
struct ReplyDelimiters {
  std::string open;   // taken off the reply's start when the reply starts with it
  std::string close;  // taken off the reply's end when the reply ends with it
};

// Streams a reply without its delimiters, so that a view never shows them even for a moment:
// the start is held until it is known whether it is `open`, and a tail that could be `close` is
// held until more text follows it (then it was part of the reply) or the reply ends.
class ReplyDelimiterStripper {
 public:
  explicit ReplyDelimiterStripper(ReplyDelimiters delimiters);
  // Text that is safe to show now.
  std::string push(std::string_view chunk);
  // The held tail, less `close` when the reply ended with it. Call once, when the reply ends.
  std::string finish();

 private:
  ReplyDelimiters delimiters_;
  std::string held_;
  bool past_open_ = false;  // the start has been seen and `open`, if there, taken off
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateKind kind) : kind_(kind) {}
  ChatTemplateKind kind() const { return kind_; }

  // Token ids for the conversation; with add_generation_prompt the ids end where the assistant's
  // reply starts. Throws std::invalid_argument for an unknown role (and, for Llama-2, for user and
  // assistant turns that do not alternate).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) const;
  // Ids of the text runs between special tokens, by text: a chat renders its whole history at
  // every turn, and SentencePiece over a 90K-token history took ~100 ms a turn. A run is encoded
  // the same wherever it stands (special tokens cut the text into runs), so reuse is exact.
  using EncodeMemo = std::unordered_map<std::string, std::vector<int32_t>>;
  std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, EncodeMemo& memo) const;
  // The same conversation as text, BOS/EOS shown as "<s>"/"</s>" (for display and debugging).
  std::string render_text(const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) const;
  // Strings that end a reply besides EOS.
  std::vector<std::string> stop_strings() const;
  // What the model writes around a reply (see ReplyDelimiters). A reply recorded without them
  // renders back to the ids the model generated, so the next turn reuses their KV.
  ReplyDelimiters reply_delimiters() const;

  // From the model folder: tokenizer_config.json's chat_template, recognised by markers of each
  // family; else the vocabulary's chat tokens and config.json's model_type, and kPlain when
  // nothing matches, with a one-line warning naming the template used instead. Throws ModelError
  // for unreadable JSON.
  static ChatTemplateKind detect(const std::filesystem::path& model_dir,
                                 const Tokenizer& tokenizer);

 private:
  ChatTemplateKind kind_;
};

}  // namespace engram
