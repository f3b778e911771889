// tokenizer.json "added_tokens": special tokens (<|im_start|>, <|eot_id|>, <s>, [INST]) and added
// text tokens (Qwen3's <think>). As in HF, they are cut out of the text before normalization, the
// leftmost-longest match first; lstrip/rstrip let a token take the whitespace beside it. Tokens
// marked normalized=true are matched on the raw text too (the families here all use false).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace engram {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // a control token: decode() leaves it out
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;  // not honoured: matched anywhere (load() warns)
  bool normalized = false;   // not honoured: matched on the raw text (load() warns)
};

// A stretch of the text: an added token, or text for the normalizer and the model.
struct TextSegment {
  int32_t added_id = -1;  // -1 for text
  std::string_view text;
  size_t offset = 0;  // where the segment starts in the whole text
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // Throws std::invalid_argument for a malformed entry (no id, empty content, id out of range).
  AddedTokens(const nlohmann::json& spec, int64_t max_id);

  std::vector<TextSegment> split(std::string_view text) const;
  const AddedToken* find(int32_t id) const;
  const AddedToken* find(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  // Indices of tokens by their first byte, longest first, for the scan in split().
  std::vector<size_t> by_first_byte_[256];
};

}  // namespace engram
