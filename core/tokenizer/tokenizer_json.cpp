#include "core/tokenizer/tokenizer_json.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/log.h"
#include "core/model/model_error.h"
#include "core/tokenizer/byte_level.h"

namespace engram {

namespace {

// The largest real tokenizer.json files are ~30 MB (262k-token vocabularies); a file far past
// that is not a tokenizer, and parsing it would take the memory of the whole machine.
constexpr std::uintmax_t kMaxFileBytes = 256u << 20;

nlohmann::json read_json_file(const std::filesystem::path& file, std::uintmax_t max_bytes) {
  const std::string name = file.string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) throw ModelError(name, "cannot be read: " + ec.message());
  if (size > max_bytes) {
    throw ModelError(name, "is " + std::to_string(size) + " bytes, more than the " +
                               std::to_string(max_bytes) + " a tokenizer file may have");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ModelError(name, "cannot be opened for reading");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(name, std::string("is not valid JSON (truncated or damaged?): ") + e.what());
  }
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
std::string special_name(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return {};
}

}  // namespace

std::unique_ptr<JsonTokenizer> JsonTokenizer::load(const std::filesystem::path& file) {
  const std::string name = file.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw ModelError(name, "tokenizer.json not found or not a regular file");
  }
  const nlohmann::json spec = read_json_file(file, kMaxFileBytes);
  auto tok = std::unique_ptr<JsonTokenizer>(new JsonTokenizer());
  try {
    if (!spec.is_object()) throw std::invalid_argument("the top level is not an object");
    if (!spec.contains("model")) throw std::invalid_argument("there is no \"model\"");
    tok->model_ = std::make_unique<BpeModel>(spec.at("model"));
    int64_t bound = tok->model_->id_bound();
    // Added tokens may lie past the model's vocabulary (Llama-3's reserved specials do).
    constexpr int64_t kMaxAddedId = 1 << 24;
    tok->added_ = AddedTokens(
        spec.contains("added_tokens") ? spec.at("added_tokens") : nlohmann::json(nullptr),
        kMaxAddedId);
    for (const auto& added : tok->added_.tokens()) {
      const std::string& existing =
          added.id < tok->model_->id_bound() ? tok->model_->piece(added.id) : std::string();
      if (!existing.empty() && existing != added.content) {
        throw std::invalid_argument("added token " + std::to_string(added.id) + " '" +
                                    added.content + "' has the id of vocabulary piece '" +
                                    existing + "'");
      }
      bound = std::max<int64_t>(bound, added.id + 1);
    }
    tok->vocab_size_ = static_cast<int32_t>(bound);
    const nlohmann::json null_json(nullptr);
    auto field = [&](const char* key) -> const nlohmann::json& {
      const auto it = spec.find(key);
      return it == spec.end() ? null_json : *it;
    };
    tok->normalizer_ = parse_normalizer(field("normalizer"));
    tok->pre_tokenizer_ = parse_pre_tokenizer(field("pre_tokenizer"));
    tok->decoder_ = parse_token_decoder(field("decoder"));
    const auto& decoder = field("decoder");
    tok->byte_level_decoder_ = decoder.is_object() && decoder.value("type", "") == "ByteLevel";
    // HF matches such tokens after normalization / only as whole words; the families Engram
    // targets use neither, so say so once rather than differ silently.
    size_t unhonoured = 0;
    std::string example;
    for (const auto& added : tok->added_.tokens()) {
      if (added.single_word || (added.normalized && tok->normalizer_)) {
        if (unhonoured++ == 0) example = added.content;
      }
    }
    if (unhonoured > 0) {
      log::warn(name + ": " + std::to_string(unhonoured) + " added token(s) (e.g. '" + example +
                "') set single_word or normalized; Engram matches them anywhere in the raw text");
    }
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(name, std::string("a field has the wrong type or is missing: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw ModelError(name, e.what());
  }
  const auto config = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config, ec)) tok->read_special_names(config);
  return tok;
}

void JsonTokenizer::read_special_names(const std::filesystem::path& config_file) {
  const nlohmann::json config = read_json_file(config_file, kMaxFileBytes);
  if (!config.is_object()) throw ModelError(config_file.string(), "is not a JSON object");
  auto lookup = [&](const char* key, bool required) {
    const std::string name = special_name(config, key);
    if (name.empty()) return -1;
    const int32_t id = id_of(name);
    if (id < 0 && required) {
      throw ModelError(config_file.string(),
                       std::string(key) + " '" + name + "' is not a token of tokenizer.json");
    }
    return id;
  };
  // A wrong BOS/EOS would change every prompt; a pad token Engram never uses need not exist.
  bos_id_ = lookup("bos_token", true);
  eos_id_ = lookup("eos_token", true);
  pad_id_ = lookup("pad_token", false);
}

std::string JsonTokenizer::piece(int32_t id) const {
  if (const AddedToken* added = added_.find(id)) return added->content;
  if (id < model_->id_bound()) return model_->piece(id);
  return {};
}

int32_t JsonTokenizer::id_of(std::string_view piece) const {
  if (const AddedToken* added = added_.find(piece)) return added->id;
  return model_->id_of(piece);
}

bool JsonTokenizer::is_special(int32_t id) const {
  const AddedToken* added = added_.find(id);
  return added && added->special;
}

int JsonTokenizer::byte_value(int32_t id) const {
  if (!model_->byte_fallback() || added_.find(id) || id >= model_->id_bound()) return -1;
  const std::string& p = model_->piece(id);
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  try {
    size_t used = 0;
    const int value = std::stoi(p.substr(3, 2), &used, 16);
    return used == 2 ? value : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

std::string JsonTokenizer::token_bytes(int32_t id) const {
  if (added_.find(id)) return piece(id);
  const int value = byte_value(id);
  if (value >= 0) return std::string(1, static_cast<char>(value));
  const std::string p = piece(id);
  std::string bytes;
  if (byte_level_decoder_ && byte_level_decode(p, &bytes)) return bytes;
  return p;
}

std::vector<int32_t> JsonTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const TextSegment& segment : added_.split(text)) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
      continue;
    }
    std::string normalized(segment.text);
    if (normalizer_) normalized = normalizer_->normalize(std::move(normalized));
    if (normalized.empty()) continue;
    std::vector<PreToken> words{{std::move(normalized), segment.offset == 0}};
    if (pre_tokenizer_) words = pre_tokenizer_->split(std::move(words));
    for (const auto& word : words)
      model_->tokenize(word.text, &ids);
  }
  return ids;
}

std::string JsonTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    tokens.push_back(piece(id));
  }
  if (!decoder_) {
    // HF joins the tokens with spaces when the file has no decoder.
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i)
      out += (i ? " " : "") + tokens[i];
    return out;
  }
  std::string out;
  for (const auto& part : decoder_->decode_chain(std::move(tokens)))
    out += part;
  return out;
}

}  // namespace engram
