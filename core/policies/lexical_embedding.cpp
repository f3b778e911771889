#include "core/policies/lexical_embedding.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <set>

namespace engram {
namespace {

const std::set<std::string>& function_words() {
  static const std::set<std::string> words = {
      "said", "user", "assi", "the",  "and",   "that", "this", "with", "have", "what",  "your",
      "you",  "for",  "was",  "are",  "but",   "not",  "just", "from", "they", "there", "about",
      "when", "did",  "does", "how",  "which", "who",  "were", "been", "will", "would", "can",
      "its",  "it's", "i'm",  "that", "some",  "then", "than", "them", "also", "very",  "much"};
  return words;
}

}  // namespace

std::vector<std::string> LexicalEmbedder::stems(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  const auto flush = [&] {
    if (word.size() >= 3) {
      std::string stem = word.substr(0, 4);
      if (!function_words().count(stem) && !function_words().count(word)) out.push_back(stem);
    }
    word.clear();
  };
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      flush();
    }
  }
  flush();
  return out;
}

LexicalEmbedder::LexicalEmbedder(const std::vector<std::string>& corpus, size_t dimension)
    : dimension_(dimension), documents_(static_cast<double>(corpus.size())) {
  for (const std::string& doc : corpus) {
    const auto s = stems(doc);
    for (const std::string& stem : std::set<std::string>(s.begin(), s.end()))
      document_frequency_[stem] += 1;
  }
}

Embedding LexicalEmbedder::embed(const std::string& text) const {
  std::unordered_map<std::string, double> tf;
  for (const std::string& stem : stems(text))
    tf[stem] += 1;
  Embedding v(dimension_, 0.0f);
  for (const auto& [stem, count] : tf) {
    const auto it = document_frequency_.find(stem);
    const double df = it == document_frequency_.end() ? 0 : it->second;
    const double idf = std::log((1 + documents_) / (1 + df)) + 1;
    v[std::hash<std::string>{}(stem) % dimension_] +=
        static_cast<float>((1 + std::log(count)) * idf);
  }
  normalize(v);
  return v;
}

}  // namespace engram
