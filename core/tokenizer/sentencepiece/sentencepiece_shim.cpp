// The only translation unit that sees SentencePiece; built as libengram_sentencepiece.so and
// loaded in isolation (see core/tokenizer/sentencepiece_backend.h for why).
#include <sentencepiece_processor.h>

#include "core/tokenizer/sentencepiece_backend.h"

namespace {

class Backend : public engram::SentencePieceBackend {
 public:
  sentencepiece::SentencePieceProcessor processor;

  std::string Encode(std::string_view text, std::vector<int>* ids) const override {
    const auto s = processor.Encode(text, ids);
    return s.ok() ? std::string() : s.ToString();
  }
  std::string Decode(const std::vector<int>& ids, std::string* text) const override {
    const auto s = processor.Decode(ids, text);
    return s.ok() ? std::string() : s.ToString();
  }
  std::string IdToPiece(int id) const override { return processor.IdToPiece(id); }
  int PieceToId(std::string_view piece) const override { return processor.PieceToId(piece); }
  int GetPieceSize() const override { return processor.GetPieceSize(); }
  int bos_id() const override { return processor.bos_id(); }
  int eos_id() const override { return processor.eos_id(); }
  int unk_id() const override { return processor.unk_id(); }
  int pad_id() const override { return processor.pad_id(); }
  bool IsControl(int id) const override { return processor.IsControl(id); }
  bool IsByte(int id) const override { return processor.IsByte(id); }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) engram::SentencePieceBackend*
engram_sentencepiece_load(const char* model_file, std::string* error) {
  auto backend = std::make_unique<Backend>();
  const auto status = backend->processor.Load(model_file);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return backend.release();
}
