#include "core/tokenizer/tokenizer.h"

#include <algorithm>
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

namespace {

// The ids of `line` read right after a newline whose id is `nl`: "\n" + line encoded, and what
// comes before the newline's id (the dummy prefix) dropped.
std::vector<int32_t> after_newline(const Tokenizer& t, std::string_view line, int32_t nl) {
  const std::vector<int32_t> ids = t.encode("\n" + std::string(line));
  const auto at = std::find(ids.begin(), ids.end(), nl);
  return at == ids.end() ? ids : std::vector<int32_t>(at + 1, ids.end());
}

}  // namespace

std::vector<int32_t> Tokenizer::encode_after_newline(std::string_view line) const {
  return after_newline(*this, line, atomic_newline_id());
}

int32_t Tokenizer::atomic_newline_id() const {
  std::call_once(newline_once_, [this] { newline_id_ = find_atomic_newline(); });
  return newline_id_;
}

int32_t Tokenizer::find_atomic_newline() const {
  if (json_) return -1;
  const int32_t nl = piece_to_id("<0x0A>");
  if (nl < 0 || !is_byte(nl)) return -1;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (processor_->IdToPiece(id).find('\n') != std::string::npos) return -1;
  }
  // Whole-text encoding against line-at-a-time encoding, on text with the whitespace that a
  // normalizer could trim, fold or move across a break.
  for (const std::string probe : {"a\nb", "x  y \n  z\n\nw \n", " lead\ttab \n\n trail  ",
                                  "\u201cQuoted,\u201d she said.\nUser said, \u201cok\u201d\n"}) {
    std::vector<int32_t> lines;
    size_t start = 0;
    for (size_t end; (end = probe.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string_view line(probe.data() + start, end - start);
      const std::vector<int32_t> part = start == 0 ? encode(line) : after_newline(*this, line, nl);
      lines.insert(lines.end(), part.begin(), part.end());
      lines.push_back(nl);
    }
    const std::vector<int32_t> last =
        after_newline(*this, std::string_view(probe.data() + start, probe.size() - start), nl);
    lines.insert(lines.end(), last.begin(), last.end());
    if (lines != encode(probe)) return -1;
  }
  return nl;
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
