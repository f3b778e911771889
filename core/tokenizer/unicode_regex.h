// The pre-tokenizer regexes of tokenizer.json files (GPT-2, Llama-3, Qwen2, tekken: \p{L},
// \p{N}, lookahead, (?i:...)) through PCRE2 in UTF + UCP mode, which reads them as the Oniguruma
// engine of Hugging Face `tokenizers` does. Invalid UTF-8 in the subject is allowed: its bytes
// match no class, so they end up in the catch-all alternatives.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace engram {

class UnicodeRegex {
 public:
  // Throws std::invalid_argument with PCRE2's message and offset when the pattern does not compile.
  explicit UnicodeRegex(const std::string& pattern);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Non-overlapping [begin, end) byte ranges of the matches, left to right; empty matches skipped.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string pattern_;
};

}  // namespace engram
