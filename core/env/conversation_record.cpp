#include "core/env/conversation_record.h"

#include <stdexcept>

namespace engram::env {

const char* question_type_name(QuestionType type) {
  switch (type) {
    case QuestionType::kSingleHop:
      return "single-hop";
    case QuestionType::kMultiHop:
      return "multi-hop";
    case QuestionType::kTemporal:
      return "temporal";
    case QuestionType::kKnowledgeUpdate:
      return "knowledge-update";
    case QuestionType::kUnanswerable:
      return "unanswerable";
  }
  return "?";
}

QuestionType parse_question_type(const std::string& name) {
  for (QuestionType t : all_question_types())
    if (name == question_type_name(t)) return t;
  throw std::invalid_argument("unknown question type '" + name + "'");
}

const std::vector<QuestionType>& all_question_types() {
  static const std::vector<QuestionType> types = {
      QuestionType::kSingleHop, QuestionType::kMultiHop, QuestionType::kTemporal,
      QuestionType::kKnowledgeUpdate, QuestionType::kUnanswerable};
  return types;
}

}  // namespace engram::env
