// QA scores as SQuAD computes them: answers are normalised (lowercase, punctuation and the
// articles a/an/the removed, whitespace collapsed); exact match is 1 when the normalised
// strings are equal, F1 is the harmonic mean of token precision and recall over the normalised
// words (counted with multiplicity). Both in [0, 1]; reported per question type and overall.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/env/conversation_record.h"

namespace engram::env {

std::string normalize_answer(const std::string& text);
double exact_match(const std::string& prediction, const std::string& gold);
double token_f1(const std::string& prediction, const std::string& gold);

struct QaScore {
  int64_t count = 0;
  double exact_match = 0;  // mean over the questions
  double f1 = 0;
};

class QaTally {
 public:
  void add(QuestionType type, const std::string& prediction, const std::string& gold);
  QaScore overall() const;
  // Only the types that had questions.
  std::map<QuestionType, QaScore> per_type() const;

 private:
  struct Sums {
    int64_t count = 0;
    double exact_match = 0;
    double f1 = 0;
  };
  static QaScore mean(const Sums& s);
  std::map<QuestionType, Sums> sums_;
};

}  // namespace engram::env
