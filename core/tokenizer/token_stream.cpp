// Why a window and an anchor rather than HF TextStreamer's "decode everything, print the new
// suffix": SentencePiece (and a tokenizer.json decoder) decodes piece by piece, and the only
// context it uses is (a) consecutive byte-fallback pieces or byte-level tokens, merged into UTF-8
// characters, and (b) the leading "▁" of the first piece
// with text, which it drops. (a) is handled by holding ids while the trailing bytes are an
// unfinished character; (b) by decoding [anchor] + window once text has started, and the whole
// (short, text-less) history before that. Each push therefore decodes a few ids (llama.cpp's
// per-token piece decoding has the same bounded cost).
#include "core/tokenizer/token_stream.h"

#include <stdexcept>

#include "core/tokenizer/tokenizer.h"

namespace engram {

namespace {

constexpr int kMaxUtf8Length = 4;

bool is_continuation(int byte) {
  return (byte & 0xC0) == 0x80;
}

// Length of the UTF-8 sequence a lead byte announces; 1 for ASCII and for bytes that cannot lead.
int sequence_length(int lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

bool is_anchor_candidate(const Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return false;
  if (id == tokenizer.unk_id() || tokenizer.is_control(id) || tokenizer.is_byte(id)) return false;
  const std::string piece = tokenizer.id_to_piece(id);
  return !piece.empty() && piece.find("\xE2\x96\x81") == std::string::npos &&
         tokenizer.decode({id}) == piece;
}

}  // namespace

TokenStream::TokenStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  for (const char* guess : {"a", "e", "x", "."}) {
    const int32_t id = tokenizer_.piece_to_id(guess);
    if (is_anchor_candidate(tokenizer_, id)) {
      anchor_id_ = id;
      break;
    }
  }
  for (int32_t id = 0; anchor_id_ < 0 && id < tokenizer_.vocab_size(); ++id) {
    if (is_anchor_candidate(tokenizer_, id)) anchor_id_ = id;
  }
  if (anchor_id_ < 0) {
    throw std::runtime_error(tokenizer_.model_file().string() +
                             ": no plain text piece to anchor streaming detokenization");
  }
  anchor_text_ = tokenizer_.decode({anchor_id_});
}

bool TokenStream::ends_inside_character() const {
  // The last bytes the pending ids spell, up to one character's worth: byte-fallback pieces give
  // one byte each, byte-level BPE tokens may end in the middle of a character.
  int bytes[kMaxUtf8Length];
  int count = 0;
  for (auto it = pending_.rbegin(); it != pending_.rend() && count < kMaxUtf8Length; ++it) {
    const std::string spelled = tokenizer_.token_bytes(*it);
    if (spelled.empty()) break;
    for (auto b = spelled.rbegin(); b != spelled.rend() && count < kMaxUtf8Length; ++b) {
      bytes[count++] = static_cast<unsigned char>(*b);
    }
  }
  // bytes[] runs backwards from the last byte; find the lead byte of the last character.
  for (int back = 0; back < count; ++back) {
    if (is_continuation(bytes[back])) continue;
    return sequence_length(bytes[back]) > back + 1;
  }
  // No bytes, or only continuation bytes: these decode to U+FFFD whatever comes next.
  return false;
}

std::string TokenStream::decode_pending() const {
  if (!text_started_) return tokenizer_.decode(pending_);
  std::vector<int32_t> window;
  window.reserve(pending_.size() + 1);
  window.push_back(anchor_id_);
  window.insert(window.end(), pending_.begin(), pending_.end());
  std::string text = tokenizer_.decode(window);
  if (text.compare(0, anchor_text_.size(), anchor_text_) != 0) {
    throw std::logic_error("streaming detokenization: anchor piece changed its text");
  }
  return text.substr(anchor_text_.size());
}

std::string TokenStream::push(int32_t id) {
  tokenizer_.is_control(id);  // range check before the id enters the window
  pending_.push_back(id);
  if (ends_inside_character()) return {};
  std::string text = decode_pending();
  // Before the first text, keep the history: a lone "▁" or a control token decodes to nothing
  // now but still decides whether the next piece's space is dropped.
  if (!text_started_ && text.empty()) return {};
  text_started_ = true;
  pending_.clear();
  return text;
}

std::string TokenStream::finish() {
  if (pending_.empty()) return {};
  std::string text = decode_pending();
  if (!text.empty()) text_started_ = true;
  pending_.clear();
  return text;
}

}  // namespace engram
