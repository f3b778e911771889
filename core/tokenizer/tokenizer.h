// A SentencePiece tokenizer read from a model folder's tokenizer.model. Thin on purpose: ids are
// int32_t like the model's embedding rows, every id-taking call checks the range (a bad id from a
// sampler is a bug we want to see, not a silent "<unk>"), and SentencePiece stays out of the header
// so that users of the engine do not compile against it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

class SentencePieceBackend;

class Tokenizer {
 public:
  // Throws ModelError naming the file when it is missing or SentencePiece rejects it.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& model_file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Plain SentencePiece encoding: the model's normalizer and dummy-prefix "▁" apply, no BOS/EOS.
  std::vector<int32_t> encode(std::string_view text) const;
  // Control tokens give no text; the first piece's leading "▁" is dropped (SentencePiece's rule).
  // Throws std::out_of_range naming the id when one is not in [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  std::string id_to_piece(int32_t id) const;
  // -1 when the piece is not in the vocabulary (SentencePiece itself would answer unk_id()).
  int32_t piece_to_id(std::string_view piece) const;

  int32_t vocab_size() const;
  // -1 when the model defines no such token (e.g. pad in the Llama-2 tokenizer).
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool is_control(int32_t id) const;
  // Byte-fallback pieces "<0x00>".."<0xFF>": byte_value() gives the byte, or -1 for other pieces.
  bool is_byte(int32_t id) const;
  int byte_value(int32_t id) const;

  const std::filesystem::path& model_file() const { return model_file_; }

 private:
  Tokenizer(std::filesystem::path model_file, std::unique_ptr<SentencePieceBackend> processor);
  void check_id(int32_t id) const;

  std::filesystem::path model_file_;
  std::unique_ptr<SentencePieceBackend> processor_;
};

}  // namespace engram
