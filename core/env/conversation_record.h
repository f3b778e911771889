// What the conversation world produces: utterances (the history a model reads), the fact log
// (ground truth: every fact the user stated, with the utterance that states it), and questions
// with short gold answers of the LongMemEval / LoCoMo kinds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram::env {

inline constexpr const char* kUserSpeaker = "User";
inline constexpr const char* kAssistantSpeaker = "Assistant";
// The gold answer of every unanswerable question.
inline constexpr const char* kUnknownAnswer = "unknown";

struct Utterance {
  std::string speaker;  // kUserSpeaker or kAssistantSpeaker
  std::string text;
  int32_t session = 0;  // 0-based
  std::string time;     // ISO date of the session, "2023-05-14"

  friend bool operator==(const Utterance&, const Utterance&) = default;
};

enum class QuestionType { kSingleHop, kMultiHop, kTemporal, kKnowledgeUpdate, kUnanswerable };

// "single-hop", "multi-hop", "temporal", "knowledge-update", "unanswerable".
const char* question_type_name(QuestionType type);
// Throws std::invalid_argument naming the text for anything else.
QuestionType parse_question_type(const std::string& name);
const std::vector<QuestionType>& all_question_types();

struct Question {
  std::string question;
  std::string answer;  // short: a word, a name, a date ("May 14, 2023"), a number
  QuestionType type = QuestionType::kSingleHop;
  std::vector<int64_t> evidence;  // utterance indices that together give the answer

  friend bool operator==(const Question&, const Question&) = default;
};

// One stated fact. `subject` is "user", a relation ("sister"), a person's or pet's name, or an
// event ("half marathon"); `attribute` what is said about it ("home_city", "name", "city",
// "kind", "pet", "adopted_pet", "event", "favorite:cuisine", ...). A later fact with the same
// subject and attribute replaces the value (knowledge update).
struct Fact {
  std::string subject;
  std::string attribute;
  std::string value;
  std::string date;  // ISO date: when it happened if `dated`, else when it was said
  bool dated = false;
  int64_t utterance = -1;  // the user utterance that states it

  friend bool operator==(const Fact&, const Fact&) = default;
};

struct Conversation {
  uint64_t seed = 0;
  std::vector<Utterance> utterances;
  std::vector<Fact> facts;  // in utterance order
  std::vector<Question> questions;
};

}  // namespace engram::env
