// SentencePiece behind an interface, loaded from a separate shared library.
// Why: Debian's libsentencepiece carries its own protobuf-lite 3.14 and exports its symbols,
// while Debian's libtorch links libprotobuf 3.21. Linked into one process they interpose each
// other and the process crashes at start. The backend library is therefore dlopen'ed with
// RTLD_LOCAL | RTLD_DEEPBIND, so SentencePiece binds to its own protobuf and torch to its own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace engram {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  // Each returns an empty string on success, else SentencePiece's message.
  virtual std::string Encode(std::string_view text, std::vector<int>* ids) const = 0;
  virtual std::string Decode(const std::vector<int>& ids, std::string* text) const = 0;
  virtual std::string IdToPiece(int id) const = 0;
  virtual int PieceToId(std::string_view piece) const = 0;
  virtual int GetPieceSize() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
  virtual int pad_id() const = 0;
  virtual bool IsControl(int id) const = 0;
  virtual bool IsByte(int id) const = 0;
};

// Loads `model_file` through the backend library. Returns null and sets `error` when
// SentencePiece rejects the file; throws std::runtime_error when the library cannot be loaded.
std::unique_ptr<SentencePieceBackend> load_sentencepiece(const std::string& model_file,
                                                         std::string* error);

}  // namespace engram
