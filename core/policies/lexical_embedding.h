// A model-free text embedding for EpiCache's clustering and routing (`epicache:embed=1`): hashed
// bag of word stems (lower case, 4-letter prefixes, a few function words left out) weighted by
// TF-IDF over the conversation's windows, unit-normalised. An experiment beside the default
// (the model's own mean-pooled states, text_embedding.h): the paper's sentence encoder cannot be
// bundled, and on the bundled 12M-parameter model the hidden states route little better than
// chance (docs/epicache.md).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/policies/episode_clustering.h"

namespace engram {

class LexicalEmbedder {
 public:
  // Document frequencies from `corpus` (the windows' texts).
  explicit LexicalEmbedder(const std::vector<std::string>& corpus, size_t dimension = 4096);
  Embedding embed(const std::string& text) const;

  // The stems a text contributes (exposed for tests).
  static std::vector<std::string> stems(const std::string& text);

 private:
  size_t dimension_;
  double documents_ = 0;
  std::unordered_map<std::string, double> document_frequency_;
};

}  // namespace engram
