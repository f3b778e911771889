// Conversations on disk as JSON lines, the format the app and the evaluation read:
//   <stem>.utterances.jsonl  {"speaker","text","session","time"} one utterance a line, in order
//   <stem>.questions.jsonl   {"question","answer","type","evidence":[utterance indices]}
//   <stem>.facts.jsonl       {"subject","attribute","value","date","dated","utterance"}
// Readers throw std::runtime_error naming the file (or "<stream>") and the 1-based line.
#pragma once

#include <filesystem>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "core/env/conversation_record.h"

namespace engram::env {

void write_utterances_jsonl(std::ostream& out, const std::vector<Utterance>& utterances);
void write_questions_jsonl(std::ostream& out, const std::vector<Question>& questions);
void write_facts_jsonl(std::ostream& out, const std::vector<Fact>& facts);

std::vector<Utterance> read_utterances_jsonl(std::istream& in,
                                             const std::string& name = "<stream>");
std::vector<Question> read_questions_jsonl(std::istream& in, const std::string& name = "<stream>");
std::vector<Fact> read_facts_jsonl(std::istream& in, const std::string& name = "<stream>");

// The three files above next to `stem` ("out/conv-7" -> "out/conv-7.utterances.jsonl", ...).
void save_conversation(const std::filesystem::path& stem, const Conversation& c);
// Reads the utterances and questions; the facts file is optional. `seed` stays 0.
Conversation load_conversation(const std::filesystem::path& stem);

}  // namespace engram::env
