#include "core/tokenizer/tokenizer.h"

#include <stdexcept>
#include <system_error>

#include "core/model/model_error.h"
#include "core/tokenizer/sentencepiece_backend.h"
#include "core/tokenizer/tokenizer_json.h"

namespace engram {

Tokenizer::Tokenizer(std::filesystem::path model_file) : model_file_(std::move(model_file)) {}

Tokenizer::~Tokenizer() = default;

std::filesystem::path Tokenizer::find_in(const std::filesystem::path& model_dir) {
  std::error_code ec;
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    if (std::filesystem::is_regular_file(model_dir / name, ec)) return model_dir / name;
  }
  return {};
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path model_file = path;
  if (std::filesystem::is_directory(path, ec)) {
    model_file = find_in(path);
    if (model_file.empty()) {
      throw ModelError(path.string(),
                       "has no tokenizer: expected tokenizer.model (SentencePiece) or "
                       "tokenizer.json (Hugging Face)");
    }
  }
  const std::string name = model_file.string();
  if (model_file.extension() == ".json") {
    auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer(model_file));
    tokenizer->json_ = JsonTokenizer::load(model_file);
    return tokenizer;
  }
  if (!std::filesystem::exists(model_file, ec)) {
    throw ModelError(name,
                     "tokenizer model not found (expected a SentencePiece tokenizer.model or a "
                     "Hugging Face tokenizer.json)");
  }
  if (!std::filesystem::is_regular_file(model_file, ec)) {
    throw ModelError(name, "tokenizer model is not a regular file");
  }
  std::string error;
  auto processor = load_sentencepiece(name, &error);
  if (!processor) {
    throw ModelError(name, "not a valid SentencePiece model (corrupt or another format): " + error);
  }
  if (processor->GetPieceSize() <= 0) {
    throw ModelError(name, "SentencePiece model has an empty vocabulary");
  }
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer(model_file));
  tokenizer->processor_ = std::move(processor);
  return tokenizer;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size()) + ") of " + model_file_.string());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (json_) return json_->encode(text);
  std::vector<int> ids;
  const std::string status = processor_->Encode(text, &ids);
  if (!status.empty()) {
    throw std::runtime_error("SentencePiece could not encode text: " + status);
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> checked_ids;
  checked_ids.reserve(ids.size());
  for (const int32_t id : ids) {
    check_id(id);
    checked_ids.push_back(id);
  }
  if (json_) return json_->decode(ids, /*skip_special=*/true);
  std::string text;
  const std::string status = processor_->Decode(checked_ids, &text);
  if (!status.empty()) {
    throw std::runtime_error("SentencePiece could not decode ids: " + status);
  }
  return text;
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  check_id(id);
  if (json_) return json_->piece(id);
  return processor_->IdToPiece(id);
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  if (json_) return json_->id_of(piece);
  const int id = processor_->PieceToId(piece);
  // SentencePiece maps every unknown piece to unk_id; only "<unk>" itself really is that id.
  if (id == processor_->unk_id() && processor_->IdToPiece(id) != piece) return -1;
  return id;
}

int32_t Tokenizer::vocab_size() const {
  if (json_) return json_->vocab_size();
  return processor_->GetPieceSize();
}
int32_t Tokenizer::bos_id() const {
  if (json_) return json_->bos_id();
  return processor_->bos_id();
}
int32_t Tokenizer::eos_id() const {
  if (json_) return json_->eos_id();
  return processor_->eos_id();
}
int32_t Tokenizer::unk_id() const {
  if (json_) return json_->unk_id();
  return processor_->unk_id();
}
int32_t Tokenizer::pad_id() const {
  if (json_) return json_->pad_id();
  return processor_->pad_id();
}

bool Tokenizer::is_control(int32_t id) const {
  check_id(id);
  if (json_) return json_->is_special(id);
  return processor_->IsControl(id);
}

bool Tokenizer::is_byte(int32_t id) const {
  check_id(id);
  if (json_) return json_->byte_value(id) >= 0;
  return processor_->IsByte(id);
}

int Tokenizer::byte_value(int32_t id) const {
  if (!is_byte(id)) return -1;
  if (json_) return json_->byte_value(id);
  // The SentencePiece trainer spells byte pieces "<0xAB>".
  const std::string& piece = processor_->IdToPiece(id);
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  return std::stoi(piece.substr(3, 2), nullptr, 16);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  if (json_) return json_->is_special(id) ? std::string() : json_->token_bytes(id);
  if (processor_->IsControl(id)) return {};
  const int value = byte_value(id);
  if (value >= 0) return std::string(1, static_cast<char>(value));
  return processor_->IdToPiece(id);
}

}  // namespace engram
