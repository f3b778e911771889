#include "core/env/conversation_format.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/env/conversation_date.h"
#include "core/env/seeded_rng.h"

namespace engram::env {
namespace {

constexpr int64_t kLettersPerToken = 6;

bool is_letter(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || static_cast<unsigned char>(c) >= 0x80;
}

int64_t line_tokens(const std::vector<Utterance>& u, size_t i, size_t begin) {
  int64_t n = estimate_tokens(utterance_line(u[i]));
  if (i == begin || u[i].session != u[i - 1].session) {
    n += estimate_tokens(session_header(u[i].session, u[i].time) + "\n");
    if (i != begin) n += 1;  // the blank line
  }
  return n;
}

}  // namespace

int64_t estimate_tokens(std::string_view text) {
  int64_t tokens = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (is_letter(c)) {
      size_t j = i;
      while (j < text.size() && is_letter(text[j]))
        ++j;
      tokens += (static_cast<int64_t>(j - i) + kLettersPerToken - 1) / kLettersPerToken;
      i = j;
      continue;
    }
    if (c != ' ') ++tokens;
    ++i;
  }
  return tokens;
}

std::string session_header(int32_t session, const std::string& iso_date) {
  return "Session " + std::to_string(session + 1) + " (" +
         CalendarDate::parse_iso(iso_date).text() + ")";
}

std::string utterance_line(const Utterance& u) {
  return u.speaker + " said, \"" + u.text + "\"\n";
}

std::string render_history(const std::vector<Utterance>& utterances, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (i == begin || utterances[i].session != utterances[i - 1].session) {
      if (i != begin) out += "\n";
      out += session_header(utterances[i].session, utterances[i].time) + "\n";
    }
    out += utterance_line(utterances[i]);
  }
  return out;
}

int64_t history_tokens(const std::vector<Utterance>& utterances, size_t begin, size_t end) {
  int64_t n = 0;
  for (size_t i = begin; i < end; ++i)
    n += line_tokens(utterances, i, begin);
  return n;
}

const std::string& qa_instruction() {
  static const std::string text =
      "Answer from the conversation in a few words, or say unknown if it never came up.\n\n";
  return text;
}

std::string qa_history_prompt(const std::vector<Utterance>& utterances, size_t begin, size_t end) {
  return qa_instruction() + render_history(utterances, begin, end);
}

std::string qa_question_suffix(const std::string& question) {
  return "\nQuestion: " + question + "\nAnswer:";
}

std::vector<TrainingExample> qa_examples(const Conversation& c, const FormatOptions& options) {
  const std::vector<Utterance>& u = c.utterances;
  std::vector<TrainingExample> out;
  for (const Question& q : c.questions) {
    const int64_t fixed =
        estimate_tokens(qa_instruction()) + estimate_tokens(qa_question_suffix(q.question));
    // Cut whole sessions from the front until the history fits.
    size_t begin = 0;
    while (begin < u.size() &&
           fixed + history_tokens(u, begin, u.size()) > options.max_prompt_tokens) {
      const int32_t session = u[begin].session;
      while (begin < u.size() && u[begin].session == session)
        ++begin;
    }
    const bool evidence_kept = std::all_of(q.evidence.begin(), q.evidence.end(), [&](int64_t e) {
      return e >= static_cast<int64_t>(begin);
    });
    if (begin >= u.size() || !evidence_kept) continue;
    out.push_back({qa_history_prompt(u, begin, u.size()) + qa_question_suffix(q.question), q.answer,
                   "qa", question_type_name(q.type), c.seed});
  }
  return out;
}

std::vector<TrainingExample> chat_examples(const Conversation& c, const FormatOptions& options) {
  const std::vector<Utterance>& u = c.utterances;
  std::vector<size_t> replies;
  for (size_t i = 1; i < u.size(); ++i)
    if (u[i].speaker == kAssistantSpeaker && u[i - 1].speaker == kUserSpeaker) replies.push_back(i);
  SeededRng rng(c.seed ^ 0x6368617421ull);  // its own stream: adding questions must not move it
  rng.shuffle(replies);
  if (replies.size() > static_cast<size_t>(options.chat_examples_per_conversation))
    replies.resize(static_cast<size_t>(options.chat_examples_per_conversation));
  std::sort(replies.begin(), replies.end());
  std::vector<TrainingExample> out;
  for (size_t r : replies) {
    size_t begin = r - 1;  // the user's turn is always in
    while (begin > 0 && history_tokens(u, begin - 1, r) <= options.chat_history_tokens)
      --begin;
    out.push_back({render_history(u, begin, r) + u[r].speaker + " said,", "\"" + u[r].text + "\"",
                   "chat", "chat", c.seed});
  }
  return out;
}

void write_training_example(std::ostream& out, const TrainingExample& e) {
  const nlohmann::json j = {{"prompt", e.prompt},
                            {"target", e.target},
                            {"kind", e.kind},
                            {"type", e.type},
                            {"seed", e.seed}};
  out << j.dump() << '\n';
}

}  // namespace engram::env
