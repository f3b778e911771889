// What a chat template renders to before tokenization: text, BOS/EOS, and named special pieces
// (a single id when the vocabulary has the piece, its text otherwise). Internal to the chat
// template files: chat_template.cpp (Llama-2, ChatML, plain, engram, detection) and
// chat_template_families.cpp (Llama-3, Qwen2.5, Qwen3, Mistral).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tokenizer/chat_template.h"

namespace engram::chat_parts {

struct Part {
  enum class Type { kText, kBos, kEos, kPiece };
  Type type;
  std::string text;
};

inline Part text_part(std::string text) {
  return {Part::Type::kText, std::move(text)};
}
inline Part bos_part() {
  return {Part::Type::kBos, "<s>"};
}
inline Part eos_part() {
  return {Part::Type::kEos, "</s>"};
}
inline Part piece_part(std::string_view piece) {
  return {Part::Type::kPiece, std::string(piece)};
}

enum class Role { kSystem, kUser, kAssistant };
// Throws std::invalid_argument for a role other than system, user, assistant.
Role role_of(const ChatMessage& message);

// Python's str.strip() / Jinja's trim on ASCII whitespace, as the HF templates apply it.
std::string strip(std::string_view s);

std::vector<Part> llama3_parts(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               bool knowledge_header);
std::vector<Part> qwen25_parts(const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt);
std::vector<Part> qwen3_parts(const std::vector<ChatMessage>& messages, bool add_generation_prompt);
std::vector<Part> mistral_parts(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace engram::chat_parts
