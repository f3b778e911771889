// tokenizer.json "decoder": tokens back to text. ByteLevel (byte-level characters to bytes, then
// UTF-8 with each ill-formed subsequence replaced by U+FFFD, as Rust's from_utf8_lossy does),
// ByteFallback (a run of <0xNN> pieces that is not valid UTF-8 gives one U+FFFD per byte), Fuse,
// Replace, Strip, Metaspace and Sequence. These are HF `tokenizers`' rules, checked against it on
// the fixtures in tests/data/tokenizers; the output is always valid UTF-8.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace engram {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// Null for a JSON null (HF then joins the tokens with spaces). Throws std::invalid_argument for an
// unsupported type or a bad field.
std::unique_ptr<TokenDecoder> parse_token_decoder(const nlohmann::json& spec);

}  // namespace engram
