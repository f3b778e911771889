// A model folder's tokenizer: SentencePiece's tokenizer.model, or Hugging Face's tokenizer.json
// (byte-level BPE of Llama-3/Qwen2/Mistral Nemo, SentencePiece-style BPE; tokenizer_json.h). Thin
// on purpose: ids are int32_t like the model's embedding rows, every id-taking call checks the
// range (a bad id from a sampler is a bug we want to see, not a silent "<unk>"), and neither
// backend shows in the header, so that users of the engine do not compile against them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

class SentencePieceBackend;
class JsonTokenizer;

class Tokenizer {
 public:
  // `path` is a tokenizer.model, a tokenizer.json or a model folder (tokenizer.model is taken
  // when the folder has both: it is what the model was trained with; the JSON is a conversion).
  // Throws ModelError naming the file when it is missing or its backend rejects it.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path);
  // The tokenizer file of a model folder by the rule above; empty when it has neither.
  static std::filesystem::path find_in(const std::filesystem::path& model_dir);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // No BOS/EOS. SentencePiece: its normalizer and dummy-prefix "▁" apply. tokenizer.json: HF's
  // pipeline without the post-processor; added tokens written in the text become their ids.
  std::vector<int32_t> encode(std::string_view text) const;
  // Control tokens give no text; the first piece's leading "▁" is dropped (SentencePiece's rule;
  // tokenizer.json: its decoder's). The text is valid UTF-8: ill-formed bytes become U+FFFD.
  // Throws std::out_of_range naming the id when one is not in [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  std::string id_to_piece(int32_t id) const;
  // -1 when the piece is not in the vocabulary (SentencePiece itself would answer unk_id()).
  int32_t piece_to_id(std::string_view piece) const;

  int32_t vocab_size() const;
  // -1 when the model defines no such token (e.g. pad in the Llama-2 tokenizer). tokenizer.json
  // names none itself: these are what tokenizer_config.json beside it says (-1 without one).
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool is_control(int32_t id) const;
  // Byte-fallback pieces "<0x00>".."<0xFF>": byte_value() gives the byte, or -1 for other pieces.
  bool is_byte(int32_t id) const;
  int byte_value(int32_t id) const;
  // The bytes the id spells before they are joined into characters: one byte for a byte piece,
  // a byte-level token's bytes (possibly part of a character), nothing for a control token.
  std::string token_bytes(int32_t id) const;

  // The id that a line break always becomes, whatever surrounds it, or -1 when that does not
  // hold: SentencePiece with no piece containing a newline (BPE cannot merge across it) and
  // byte fallback, checked on probe strings (a normalizer that trims or folds whitespace fails
  // them). Then the tokens of "a\nb" are those of "a", this id and those of "b" read after a
  // newline, so text can be encoded a line at a time (ChatTemplate's memo). Computed once.
  int32_t atomic_newline_id() const;
  // The ids of `line` read right after a line break (no dummy prefix; the line has no newline).
  // Meaningful only when atomic_newline_id() >= 0.
  std::vector<int32_t> encode_after_newline(std::string_view line) const;

  const std::filesystem::path& model_file() const { return model_file_; }

 private:
  explicit Tokenizer(std::filesystem::path model_file);
  void check_id(int32_t id) const;

  int32_t find_atomic_newline() const;

  std::filesystem::path model_file_;
  mutable std::once_flag newline_once_;
  mutable int32_t newline_id_ = -1;
  // Exactly one is set.
  std::unique_ptr<SentencePieceBackend> processor_;
  std::unique_ptr<JsonTokenizer> json_;
};

}  // namespace engram
