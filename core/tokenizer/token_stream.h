// Streaming detokenization for generation: ids go in one at a time, text comes out as soon as it
// is final. Contract: every chunk is valid UTF-8 (a character spelled by byte-fallback pieces such
// as <0xE2> <0x82> <0xAC> is held until it is complete), the concatenation of all chunks equals
// Tokenizer::decode(all ids), control tokens give no text, and each push costs O(ids since the last
// emitted chunk), never the whole history.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram {

class Tokenizer;

class TokenStream {
 public:
  // The tokenizer must outlive the stream.
  explicit TokenStream(const Tokenizer& tokenizer);

  // Text completed by this id (often empty). Throws std::out_of_range for an id outside the vocab.
  std::string push(int32_t id);
  // Whatever is still held (an unfinished byte sequence decodes to U+FFFD, as decode() does).
  // Call once, when generation ends.
  std::string finish();

 private:
  bool ends_inside_character() const;
  std::string decode_pending() const;

  const Tokenizer& tokenizer_;
  // A normal piece without "▁" put in front of each window, so SentencePiece's "strip the first
  // piece's leading space" rule falls on it rather than on a word in the middle of the reply.
  int32_t anchor_id_ = -1;
  std::string anchor_text_;
  // Ids not yet turned into text. Until the first text is out, this is the whole history, so the
  // leading-space rule is applied exactly as decode() applies it.
  std::vector<int32_t> pending_;
  bool text_started_ = false;
};

}  // namespace engram
