// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Prepend, Replace, Lowercase and Sequence, the
// ones the Llama-2, Mistral and Qwen2 families use. Applied to each text segment between added
// tokens, before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace engram {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// Null for a JSON null. Throws std::invalid_argument naming an unsupported type or a bad field.
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& spec);

}  // namespace engram
