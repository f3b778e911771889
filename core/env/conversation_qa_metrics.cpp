#include "core/env/conversation_qa_metrics.h"

#include <cctype>
#include <sstream>

namespace engram::env {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

}  // namespace

std::string normalize_answer(const std::string& text) {
  std::string no_punct;
  for (char c : text) {
    if (std::ispunct(static_cast<unsigned char>(c))) continue;
    no_punct += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string out;
  for (const std::string& w : split(no_punct)) {
    if (w == "a" || w == "an" || w == "the") continue;
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

double exact_match(const std::string& prediction, const std::string& gold) {
  return normalize_answer(prediction) == normalize_answer(gold) ? 1.0 : 0.0;
}

double token_f1(const std::string& prediction, const std::string& gold) {
  const std::vector<std::string> p = split(normalize_answer(prediction));
  const std::vector<std::string> g = split(normalize_answer(gold));
  // SQuAD: if either side has no tokens, F1 is 1 when both are empty and 0 otherwise.
  if (p.empty() || g.empty()) return p.empty() && g.empty() ? 1.0 : 0.0;
  std::map<std::string, int64_t> gold_counts;
  for (const std::string& w : g)
    ++gold_counts[w];
  int64_t common = 0;
  for (const std::string& w : p) {
    auto it = gold_counts.find(w);
    if (it != gold_counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / static_cast<double>(p.size());
  const double recall = static_cast<double>(common) / static_cast<double>(g.size());
  return 2 * precision * recall / (precision + recall);
}

void QaTally::add(QuestionType type, const std::string& prediction, const std::string& gold) {
  Sums& s = sums_[type];
  ++s.count;
  s.exact_match += exact_match(prediction, gold);
  s.f1 += token_f1(prediction, gold);
}

QaScore QaTally::mean(const Sums& s) {
  if (s.count == 0) return {};
  return {s.count, s.exact_match / static_cast<double>(s.count),
          s.f1 / static_cast<double>(s.count)};
}

QaScore QaTally::overall() const {
  Sums total;
  for (const auto& [type, s] : sums_) {
    total.count += s.count;
    total.exact_match += s.exact_match;
    total.f1 += s.f1;
  }
  return mean(total);
}

std::map<QuestionType, QaScore> QaTally::per_type() const {
  std::map<QuestionType, QaScore> out;
  for (const auto& [type, s] : sums_)
    out[type] = mean(s);
  return out;
}

}  // namespace engram::env
