// The chat templates of current Hugging Face model families, as their tokenizer_config.json
// chat_template renders them (tool branches left out), checked against transformers'
// apply_chat_template in tests/test_chat_template_families.cpp:
//
// Llama-3: BOS, then per message <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}
// <|eot_id|>. Llama-3.1/3.2/3.3 ("llama3.1") always open with a system header holding
// "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" and the system prompt. The
// date is the template's own default, fixed on purpose: the rendering stays a function of the
// messages, so a conversation restored another day renders to the ids its stored KV was computed
// for (3.2's template would take today's date when the caller passes none).
//
// Qwen2.5: ChatML, with "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." as
// the system turn when the conversation has none. No BOS (Qwen has none).
//
// Qwen3, thinking off (enable_thinking=false, the only mode Engram drives): ChatML without a
// default system turn; the generation prompt ends with an empty "<think>\n\n</think>\n\n"; an
// assistant turn loses its <think> block unless it comes after the last user turn.
//
// Mistral (Nemo, v3 tekken): BOS, "[INST]{user}[/INST]{assistant}</s>" with no spaces, and the
// system prompt put in front of the *last* user turn only ("{system}\n\n{user}"), so a rendering
// that ends with an assistant turn has no system prompt at all (as the template does).
#include <stdexcept>

#include "core/tokenizer/chat_parts.h"

namespace engram::chat_parts {

namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

void chatml_turn(std::vector<Part>& parts, const std::string& role, const std::string& content) {
  parts.push_back(piece_part(kImStart));
  parts.push_back(text_part(role + "\n" + content));
  parts.push_back(piece_part(kImEnd));
  parts.push_back(text_part("\n"));
}

void llama3_header(std::vector<Part>& parts, const std::string& role) {
  parts.push_back(piece_part("<|start_header_id|>"));
  parts.push_back(text_part(role));
  parts.push_back(piece_part("<|end_header_id|>"));
  parts.push_back(text_part("\n\n"));
}

std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  while (left && begin < end && chars.find(s[begin]) != std::string_view::npos)
    ++begin;
  while (right && end > begin && chars.find(s[end - 1]) != std::string_view::npos)
    --end;
  return std::string(s.substr(begin, end - begin));
}

}  // namespace

std::vector<Part> llama3_parts(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               bool knowledge_header) {
  std::vector<Part> parts{piece_part("<|begin_of_text|>")};
  size_t first = 0;
  if (knowledge_header) {
    std::string system;
    if (!messages.empty() && role_of(messages[0]) == Role::kSystem) {
      system = strip(messages[0].content);
      first = 1;
    }
    llama3_header(parts, "system");
    parts.push_back(
        text_part("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system));
    parts.push_back(piece_part("<|eot_id|>"));
  }
  for (size_t i = first; i < messages.size(); ++i) {
    role_of(messages[i]);
    llama3_header(parts, messages[i].role);
    parts.push_back(text_part(strip(messages[i].content)));
    parts.push_back(piece_part("<|eot_id|>"));
  }
  if (add_generation_prompt) llama3_header(parts, "assistant");
  return parts;
}

std::vector<Part> qwen25_parts(const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt) {
  std::vector<Part> parts;
  const bool has_system = !messages.empty() && role_of(messages[0]) == Role::kSystem;
  if (!has_system) chatml_turn(parts, "system", std::string(kQwenDefaultSystem));
  for (const auto& message : messages) {
    role_of(message);
    chatml_turn(parts, message.role, message.content);
  }
  if (add_generation_prompt) {
    parts.push_back(piece_part(kImStart));
    parts.push_back(text_part("assistant\n"));
  }
  return parts;
}

std::vector<Part> qwen3_parts(const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) {
  // The last user turn: assistant turns after it keep their reasoning.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    if (role_of(messages[i]) == Role::kUser) {
      last_query = i;
      break;
    }
  }
  std::vector<Part> parts;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (role_of(message) != Role::kAssistant) {
      chatml_turn(parts, message.role, message.content);
      continue;
    }
    std::string content = message.content;
    std::string reasoning;
    const size_t close = content.find("</think>");
    if (close != std::string::npos) {
      std::string before = strip_chars(content.substr(0, close), "\n", false, true);
      const size_t open = before.rfind("<think>");
      if (open != std::string::npos) before = before.substr(open + 7);
      reasoning = strip_chars(before, "\n", true, false);
      content = strip_chars(content.substr(content.rfind("</think>") + 8), "\n", true, false);
    }
    std::string text = "assistant\n";
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      text += "<think>\n" + strip_chars(reasoning, "\n", true, true) + "\n</think>\n\n" +
              strip_chars(content, "\n", true, false);
    } else {
      text += content;
    }
    parts.push_back(piece_part(kImStart));
    parts.push_back(text_part(text));
    parts.push_back(piece_part(kImEnd));
    parts.push_back(text_part("\n"));
  }
  if (add_generation_prompt) {
    parts.push_back(piece_part(kImStart));
    parts.push_back(text_part("assistant\n<think>\n\n</think>\n\n"));
  }
  return parts;
}

std::vector<Part> mistral_parts(
    const std::vector<ChatMessage>& messages,
    bool /*add_generation_prompt: "[/INST]" already ends a user turn*/) {
  std::vector<Part> parts{bos_part()};
  size_t first = 0;
  const std::string* system = nullptr;
  if (!messages.empty() && role_of(messages[0]) == Role::kSystem) {
    system = &messages[0].content;
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const Role role = role_of(messages[i]);
    const bool expect_user = (i - first) % 2 == 0;
    if ((role == Role::kUser) != expect_user || role == Role::kSystem) {
      throw std::invalid_argument(
          "Mistral chat: after the optional system message, roles must alternate user/assistant");
    }
    if (role == Role::kUser) {
      const bool last = i + 1 == messages.size();
      parts.push_back(piece_part("[INST]"));
      parts.push_back(
          text_part(last && system ? *system + "\n\n" + messages[i].content : messages[i].content));
      parts.push_back(piece_part("[/INST]"));
    } else {
      parts.push_back(text_part(messages[i].content));
      parts.push_back(eos_part());
    }
  }
  return parts;
}

}  // namespace engram::chat_parts
