// What each template matches:
//
// Llama-2: Meta's reference `chat_completion` (llama/generation.py) and HF's Llama-2 chat template
// tokenized by LlamaTokenizer. Both give, per exchange, BOS + SentencePiece("[INST] {user} [/INST]
// {assistant} ") + EOS: the text between two special tokens is one SentencePiece call with its
// dummy "▁" (so "[INST]" is ▁[ INST ] = 518 25580 29962 after BOS, and the space before </s>
// is the lone piece ▁ = 29871); user and assistant contents are strip()ped; the system prompt is
// folded into the first user turn as "<<SYS>>\n{system}\n<</SYS>>\n\n". Older transformers
// releases stripped the space before </s>; we follow Meta's reference there.
//
// ChatML: text between special ids is encoded with SentencePiece's dummy prefix, as llama.cpp and
// the legacy LlamaTokenizer do for SentencePiece models; BOS is prepended when the vocabulary has
// one (llama.cpp does for these models; HF's ChatML templates leave it out).
//
// Plain: our own format for small models without chat tokens. Each reply ends "\n\n" + EOS, so
// every turn after BOS or EOS starts with the same "▁###" piece.
//
// Engram: the chat records of Engram's conversation corpus (env::chat_examples), on which
// engram-tiny was trained as BOS + SentencePiece(history + "Assistant said,") +
// SentencePiece("\"reply\"") + EOS. The whole conversation after BOS is one text run, as the
// training prompt was one call: no EOS between turns (the corpus histories have none), and the
// dummy "▁" of the reply's own call is the space that "Assistant said, \"" has in the history, so
// a reply re-rendered inside the history gives the ids the model generated ("▁\"" starts both).
#include "core/tokenizer/chat_template.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/log.h"
#include "core/model/model_error.h"
#include "core/tokenizer/chat_parts.h"
#include "core/tokenizer/tokenizer.h"

namespace engram {

namespace chat_parts {

Role role_of(const ChatMessage& message) {
  if (message.role == "system") return Role::kSystem;
  if (message.role == "user") return Role::kUser;
  if (message.role == "assistant") return Role::kAssistant;
  throw std::invalid_argument("chat message role '" + message.role +
                              "' is not one of system, user, assistant");
}

std::string strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kSpace);
  return std::string(s.substr(begin, end - begin + 1));
}

}  // namespace chat_parts

namespace {

using namespace chat_parts;

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// Every history in the corpus starts with a dated session header (env::session_header), and
// without one engram-tiny answers noise (measured, greedy: "I made lasagna for dinner tonight."
// gets "trip sounds frustrating. Did it ends." without it, "Lasagna sounds delicious. Did it turn
// out well?" with it). A fixed date keeps the rendering a function of the messages alone, so a
// conversation restored on another day renders to the ids its stored KV was computed for.
constexpr std::string_view kEngramSessionHeader = "Session 1 (February 11, 2024)\n";
constexpr std::string_view kEngramQuote = "\"";
// Detection: the utterance lines of the template source, e.g. `'User said, "' + content`.
constexpr std::string_view kEngramMarker = "said, \"";

std::vector<Part> llama2_parts(const std::vector<ChatMessage>& messages) {
  std::vector<Part> parts;
  std::optional<std::string> system;
  bool expect_user = true;
  for (const auto& message : messages) {
    switch (role_of(message)) {
      case Role::kSystem:
        system = system ? *system + "\n\n" + message.content : message.content;
        break;
      case Role::kUser: {
        if (!expect_user) {
          throw std::invalid_argument(
              "Llama-2 chat: two user turns in a row (roles must alternate)");
        }
        std::string content = message.content;
        if (system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + content;
        system.reset();
        parts.push_back(bos_part());
        parts.push_back(text_part("[INST] " + strip(content) + " [/INST]"));
        expect_user = false;
        break;
      }
      case Role::kAssistant:
        if (expect_user) {
          throw std::invalid_argument(
              "Llama-2 chat: an assistant turn without a user turn before it");
        }
        parts.push_back(text_part(" " + strip(message.content) + " "));
        parts.push_back(eos_part());
        expect_user = true;
        break;
    }
  }
  // A system prompt with no user turn yet (e.g. prefilling the shared system prefix): the text a
  // later user turn will start with, unstripped so that it stays a prefix of that turn.
  if (system) {
    parts.push_back(bos_part());
    parts.push_back(text_part("[INST] <<SYS>>\n" + *system + "\n<</SYS>>\n\n"));
  }
  // The generation prompt is the "[/INST]" that already ends a user turn.
  return parts;
}

std::vector<Part> chatml_parts(const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt) {
  std::vector<Part> parts{bos_part()};
  for (const auto& message : messages) {
    role_of(message);
    parts.push_back(piece_part(kImStart));
    parts.push_back(text_part(message.role + "\n" + message.content));
    parts.push_back(piece_part(kImEnd));
    parts.push_back(text_part("\n"));
  }
  if (add_generation_prompt) {
    parts.push_back(piece_part(kImStart));
    parts.push_back(text_part("assistant\n"));
  }
  return parts;
}

std::vector<Part> plain_parts(const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) {
  std::vector<Part> parts{bos_part()};
  for (const auto& message : messages) {
    switch (role_of(message)) {
      case Role::kSystem:
        parts.push_back(text_part("### System:\n" + message.content + "\n\n"));
        break;
      case Role::kUser:
        parts.push_back(text_part("### User:\n" + message.content + "\n\n"));
        break;
      case Role::kAssistant:
        parts.push_back(text_part("### Assistant:\n" + message.content + "\n\n"));
        parts.push_back(eos_part());
        break;
    }
  }
  if (add_generation_prompt) parts.push_back(text_part("### Assistant:\n"));
  return parts;
}

std::vector<Part> engram_parts(const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt) {
  std::string text;
  bool header_written = false;
  auto open_session = [&] {
    if (!header_written) text += kEngramSessionHeader;
    header_written = true;
  };
  for (const auto& message : messages) {
    switch (role_of(message)) {
      case Role::kSystem:
        // The corpus has no system turns, so engram-tiny cannot follow an instruction; the
        // message is still shown to it as a line of its own (dropping it would hide from the
        // caller that it has no effect), above the session header so that the header stays
        // right before the turns as in every training history. Measured: "You are terse." above
        // the header leaves the reply to the lasagna line unchanged.
        text += message.content + "\n";
        break;
      case Role::kUser:
        open_session();
        text += "User said, " + std::string(kEngramQuote) + message.content +
                std::string(kEngramQuote) + "\n";
        break;
      case Role::kAssistant:
        open_session();
        text += "Assistant said, " + std::string(kEngramQuote) + message.content +
                std::string(kEngramQuote) + "\n";
        break;
    }
  }
  open_session();
  if (add_generation_prompt) text += "Assistant said,";
  return {bos_part(), text_part(std::move(text))};
}

std::vector<Part> parts_for(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) {
  switch (kind) {
    case ChatTemplateKind::kLlama2:
      return llama2_parts(messages);
    case ChatTemplateKind::kChatML:
      return chatml_parts(messages, add_generation_prompt);
    case ChatTemplateKind::kPlain:
      return plain_parts(messages, add_generation_prompt);
    case ChatTemplateKind::kEngram:
      return engram_parts(messages, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return llama3_parts(messages, add_generation_prompt, /*knowledge_header=*/false);
    case ChatTemplateKind::kLlama31:
      return llama3_parts(messages, add_generation_prompt, /*knowledge_header=*/true);
    case ChatTemplateKind::kQwen25:
      return qwen25_parts(messages, add_generation_prompt);
    case ChatTemplateKind::kQwen3:
      return qwen3_parts(messages, add_generation_prompt);
    case ChatTemplateKind::kMistral:
      return mistral_parts(messages, add_generation_prompt);
  }
  throw std::logic_error("unknown ChatTemplateKind");
}

std::optional<nlohmann::json> read_json(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  std::ifstream in(file);
  if (!in) throw ModelError(file.string(), "cannot be opened for reading");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(file.string(), std::string("is not valid JSON: ") + e.what());
  }
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} (HF allows both).
std::string chat_template_source(const nlohmann::json& config) {
  const auto it = config.find("chat_template");
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string first;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) {
        continue;
      }
      const auto name = entry.find("name");
      const std::string source = entry["template"].get<std::string>();
      if (name != entry.end() && name->is_string() && *name == "default") return source;
      if (first.empty()) first = source;
    }
    return first;
  }
  return {};
}

bool contains(const std::string& source, std::string_view marker) {
  return source.find(marker) != std::string::npos;
}

// A template source to a kind by markers that each family's template has and the others lack.
std::optional<ChatTemplateKind> kind_of_template_source(const std::string& source) {
  if (source.empty()) return std::nullopt;
  if (contains(source, kEngramMarker)) return ChatTemplateKind::kEngram;
  if (contains(source, kImStart)) {
    if (contains(source, "<think>") || contains(source, "enable_thinking")) {
      return ChatTemplateKind::kQwen3;
    }
    if (contains(source, "You are Qwen, created by Alibaba Cloud"))
      return ChatTemplateKind::kQwen25;
    return ChatTemplateKind::kChatML;
  }
  if (contains(source, "<|start_header_id|>") && contains(source, "<|eot_id|>")) {
    return contains(source, "Cutting Knowledge Date") ? ChatTemplateKind::kLlama31
                                                      : ChatTemplateKind::kLlama3;
  }
  if (contains(source, "[INST]")) {
    if (contains(source, "<<SYS>>")) return ChatTemplateKind::kLlama2;
    // Mistral v3-tekken (Nemo) writes "[INST]" + content with no space; older Mistral and
    // Llama-2-style templates write "[INST] " and are closest to Llama-2.
    for (std::string_view tight : {"\"[INST]\" +", "'[INST]' +", "\"[INST]\"+", "'[INST]'+"}) {
      if (contains(source, tight)) return ChatTemplateKind::kMistral;
    }
    return ChatTemplateKind::kLlama2;
  }
  return std::nullopt;
}

}  // namespace

namespace {

constexpr std::pair<ChatTemplateKind, std::string_view> kKindNames[] = {
    {ChatTemplateKind::kLlama2, "llama2"},   {ChatTemplateKind::kChatML, "chatml"},
    {ChatTemplateKind::kPlain, "plain"},     {ChatTemplateKind::kEngram, "engram"},
    {ChatTemplateKind::kLlama3, "llama3"},   {ChatTemplateKind::kLlama31, "llama3.1"},
    {ChatTemplateKind::kQwen25, "qwen2.5"},  {ChatTemplateKind::kQwen3, "qwen3"},
    {ChatTemplateKind::kMistral, "mistral"},
};

}  // namespace

ChatTemplateKind parse_chat_template_kind(std::string_view name) {
  std::string known;
  for (const auto& [kind, kind_name] : kKindNames) {
    if (name == kind_name) return kind;
    known += (known.empty() ? "" : ", ") + std::string(kind_name);
  }
  throw std::invalid_argument("chat template '" + std::string(name) + "' is not one of " + known);
}

std::string_view chat_template_kind_name(ChatTemplateKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

ReplyDelimiterStripper::ReplyDelimiterStripper(ReplyDelimiters delimiters)
    : delimiters_(std::move(delimiters)) {}

std::string ReplyDelimiterStripper::push(std::string_view chunk) {
  held_ += chunk;
  const std::string& open = delimiters_.open;
  if (!past_open_) {
    if (held_.size() < open.size() && open.starts_with(held_)) return {};
    past_open_ = true;
    if (held_.starts_with(open)) held_.erase(0, open.size());
  }
  // Hold the longest tail that is a start of `close`.
  const std::string& close = delimiters_.close;
  size_t keep = std::min(close.size(), held_.size());
  while (keep > 0 && close.compare(0, keep, held_, held_.size() - keep, keep) != 0)
    --keep;
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string ReplyDelimiterStripper::finish() {
  if (!past_open_) {
    // A reply shorter than `open` that is a start of it: there is no reply text.
    past_open_ = true;
    held_.clear();
  }
  if (!delimiters_.close.empty() && held_ == delimiters_.close) held_.clear();
  return std::exchange(held_, {});
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer,
                                          const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt) const {
  EncodeMemo once;
  return encode(tokenizer, messages, add_generation_prompt, once);
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer,
                                          const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt, EncodeMemo& memo) const {
  std::vector<int32_t> ids;
  std::string text;  // adjacent text parts are one SentencePiece call
  // A run is looked up whole; with a tokenizer whose line break is atomic, a run of several
  // lines is looked up a line at a time instead (the engram template's history is one run that
  // grows every turn: whole, it was re-tokenized every turn, 25 ms a turn at 10K tokens and 69 ms
  // at 30K on a 2-core CPU). Line keys start with a NUL byte, which no text has.
  const auto cached = [&](const std::string& key,
                          const auto& encode) -> const std::vector<int32_t>& {
    auto it = memo.find(key);
    if (it == memo.end()) it = memo.emplace(key, encode()).first;
    return it->second;
  };
  const int32_t newline = tokenizer.atomic_newline_id();
  std::string line_key;
  auto flush = [&] {
    if (text.empty()) return;
    const size_t first_break = text.find('\n');
    if (newline < 0 || first_break == std::string::npos || first_break == 0) {
      const std::vector<int32_t>& run = cached(text, [&] { return tokenizer.encode(text); });
      ids.insert(ids.end(), run.begin(), run.end());
      text.clear();
      return;
    }
    for (size_t start = 0;;) {
      const size_t end = text.find('\n', start);
      const std::string_view line(text.data() + start,
                                  (end == std::string::npos ? text.size() : end) - start);
      line_key.assign(1, '\0');
      line_key += start == 0 ? 'F' : 'R';
      line_key += line;
      const std::vector<int32_t>& part = cached(line_key, [&] {
        return start == 0 ? tokenizer.encode(line) : tokenizer.encode_after_newline(line);
      });
      ids.insert(ids.end(), part.begin(), part.end());
      if (end == std::string::npos) break;
      ids.push_back(newline);
      start = end + 1;
    }
    text.clear();
  };
  for (const auto& part : parts_for(kind_, messages, add_generation_prompt)) {
    int32_t id = -1;
    switch (part.type) {
      case Part::Type::kText:
        break;
      case Part::Type::kBos:
        id = tokenizer.bos_id();
        if (id < 0) continue;
        break;
      case Part::Type::kEos:
        id = tokenizer.eos_id();
        if (id < 0) continue;
        break;
      case Part::Type::kPiece:
        id = tokenizer.piece_to_id(part.text);
        break;
    }
    if (id < 0) {
      text += part.text;
    } else {
      flush();
      ids.push_back(id);
    }
  }
  flush();
  return ids;
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt) const {
  std::string text;
  for (const auto& part : parts_for(kind_, messages, add_generation_prompt))
    text += part.text;
  return text;
}

std::vector<std::string> ChatTemplate::stop_strings() const {
  switch (kind_) {
    case ChatTemplateKind::kLlama2:
      return {};  // replies end with EOS
    case ChatTemplateKind::kChatML:
      return {std::string(kImEnd), std::string(kImStart)};
    case ChatTemplateKind::kPlain:
      return {"### User:", "### System:"};
    case ChatTemplateKind::kEngram:
      // Every utterance in the corpus is one line; a newline means the model has gone on past
      // its closing quote into the next line of the history.
      return {"\n"};
    case ChatTemplateKind::kQwen25:
    case ChatTemplateKind::kQwen3:
      return {std::string(kImEnd), std::string(kImStart)};
    case ChatTemplateKind::kLlama3:
    case ChatTemplateKind::kLlama31:
      // Replies end with <|eot_id|> (generation_config's EOS); these catch a model whose
      // tokenizer spells the markers as text.
      return {"<|eot_id|>", "<|start_header_id|>"};
    case ChatTemplateKind::kMistral:
      return {"[INST]"};
  }
  return {};
}

ReplyDelimiters ChatTemplate::reply_delimiters() const {
  if (kind_ == ChatTemplateKind::kEngram) {
    return {std::string(kEngramQuote), std::string(kEngramQuote)};
  }
  return {};
}

ChatTemplateKind ChatTemplate::detect(const std::filesystem::path& model_dir,
                                      const Tokenizer& tokenizer) {
  std::string source;
  if (const auto config = read_json(model_dir / "tokenizer_config.json")) {
    source = chat_template_source(*config);
    if (const auto kind = kind_of_template_source(source)) return *kind;
  }
  std::string type;
  if (const auto config = read_json(model_dir / "config.json")) {
    const auto it = config->find("model_type");
    if (it != config->end() && it->is_string()) type = it->get<std::string>();
  }
  std::optional<ChatTemplateKind> kind;
  if (tokenizer.piece_to_id(kImStart) >= 0) {
    kind = type == "qwen3"   ? ChatTemplateKind::kQwen3
           : type == "qwen2" ? ChatTemplateKind::kQwen25
                             : ChatTemplateKind::kChatML;
  } else if (tokenizer.piece_to_id("<|start_header_id|>") >= 0 &&
             tokenizer.piece_to_id("<|eot_id|>") >= 0) {
    kind = ChatTemplateKind::kLlama31;
  } else if (tokenizer.piece_to_id("[INST]") >= 0 && tokenizer.piece_to_id("[/INST]") >= 0) {
    kind = ChatTemplateKind::kMistral;
  } else if ((type == "llama" || type == "mistral") && tokenizer.vocab_size() == 32000) {
    kind = ChatTemplateKind::kLlama2;
  }
  if (!source.empty() || !kind) {
    const ChatTemplateKind used = kind.value_or(ChatTemplateKind::kPlain);
    std::string what =
        source.empty() ? "has no chat_template" : "has a chat_template Engram does not know";
    log::warn(model_dir.string() + ": tokenizer_config.json " + what + "; using the '" +
              std::string(chat_template_kind_name(used)) + "' template instead" +
              (kind ? " (from the vocabulary and config.json)" : ""));
    return used;
  }
  return *kind;
}

}  // namespace engram
