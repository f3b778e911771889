// tokenizer.json "pre_tokenizer": how a normalized segment is cut into the words that BPE sees.
// Split (a regex or string with HF's delimiter behaviours, PCRE2 for the regex), ByteLevel (GPT-2's
// regex, then bytes spelled as byte-level characters), Metaspace (" " -> "▁" and the dummy prefix),
// Digits and Sequence: the configurations of GPT-2, Llama-3, Qwen2, tekken and Mistral v0.3.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace engram {

struct PreToken {
  std::string text;
  // Starts at offset 0 of the text given to encode(): Metaspace's prepend_scheme "first" uses it.
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual std::vector<PreToken> split(std::vector<PreToken> pieces) const = 0;
};

// Null for a JSON null. Throws std::invalid_argument naming an unsupported type or a bad field.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& spec);

}  // namespace engram
