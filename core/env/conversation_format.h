// The text a model sees for the conversation world, as EpiCache formats a conversation: one
// `Speaker said, "text"` line per utterance under a dated header per session. A QA prompt is
// the history plus the question; a chat prompt is the history's tail plus the user's turn.
//
// Training records are {prompt, target}: the trainer encodes the two separately and appends
// EOS to the target, so SentencePiece's dummy prefix supplies the space after "Answer:" (QA)
// and after "Assistant said," (chat); the evaluation encodes the prompt the same way and stops
// at EOS or a newline.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/env/conversation_record.h"

namespace engram::env {

// A tokenizer-free length estimate, close to a Llama-style 32k SentencePiece vocabulary on this
// corpus (measured: see the eval command's report of real token counts): a letter run costs one
// token per 6 letters, every digit, punctuation mark and newline one. Additive over lines, so
// the generator can budget a conversation line by line.
int64_t estimate_tokens(std::string_view text);

// "Session 3 (May 14, 2023)"; `session` is 0-based.
std::string session_header(int32_t session, const std::string& iso_date);
// `User said, "I moved to Denver today!"`
std::string utterance_line(const Utterance& u);
// Utterances [begin, end) with a header (preceded by a blank line unless first) wherever the
// session changes; every line ends with '\n'.
std::string render_history(const std::vector<Utterance>& utterances, size_t begin, size_t end);
// estimate_tokens(render_history(...)) without building the string.
int64_t history_tokens(const std::vector<Utterance>& utterances, size_t begin, size_t end);

// The fixed instruction before a QA history.
const std::string& qa_instruction();
// instruction + history of utterances [begin, end): the part a cache can hold before any question.
std::string qa_history_prompt(const std::vector<Utterance>& utterances, size_t begin, size_t end);
// "\nQuestion: ...\nAnswer:" appended to qa_history_prompt().
std::string qa_question_suffix(const std::string& question);

struct FormatOptions {
  // The bundled model's context is 4,096 tokens; the rest is the answer's room.
  int64_t max_prompt_tokens = 4064;
  // Chat examples see this much of the history before the user's turn.
  int64_t chat_history_tokens = 768;
  int32_t chat_examples_per_conversation = 8;
};

struct TrainingExample {
  std::string prompt;
  std::string target;
  std::string kind;  // "qa" or "chat"
  std::string type;  // question_type_name() for "qa", "chat" for chat
  uint64_t seed = 0;
};

// One example per question. The history is cut from the front (whole sessions) to fit
// max_prompt_tokens; a question whose evidence would be cut is left out.
std::vector<TrainingExample> qa_examples(const Conversation& c, const FormatOptions& options);
// Up to chat_examples_per_conversation assistant replies, chosen by the conversation's seed:
// prompt = the history tail + the user's turn + "Assistant said,", target = `"reply"`.
std::vector<TrainingExample> chat_examples(const Conversation& c, const FormatOptions& options);

void write_training_example(std::ostream& out, const TrainingExample& e);  // one JSON line

}  // namespace engram::env
