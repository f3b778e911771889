// A Hugging Face tokenizer.json: added tokens, normalizer, pre-tokenizer, BPE model and decoder,
// run in HF's order so that ids match `tokenizers` token for token (byte-level BPE of GPT-2,
// Llama-3, Qwen2 and Mistral's tekken; SentencePiece-style BPE with byte fallback of Llama-2 and
// Mistral). The post-processor is not applied: encode() adds no BOS/EOS, as Tokenizer promises.
// BOS/EOS/PAD come from tokenizer_config.json beside the file when it names them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/added_tokens.h"
#include "core/tokenizer/bpe_model.h"
#include "core/tokenizer/normalizer.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/token_decoder.h"

namespace engram {

class JsonTokenizer {
 public:
  // Throws ModelError naming the file and what is wrong (missing, too large, not JSON, a field of
  // the wrong type, a merge of unknown tokens, an unsupported component).
  static std::unique_ptr<JsonTokenizer> load(const std::filesystem::path& file);

  // Any bytes are accepted: invalid UTF-8 reaches the model as single bytes (byte-level spells
  // them, byte fallback gives <0xNN>), where HF, whose strings are Unicode, cannot take them.
  std::vector<int32_t> encode(std::string_view text) const;
  // Ids must be in range (Tokenizer checks). Special added tokens are left out when asked.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;

  int32_t vocab_size() const { return vocab_size_; }
  std::string piece(int32_t id) const;
  int32_t id_of(std::string_view piece) const;
  bool is_special(int32_t id) const;
  int byte_value(int32_t id) const;  // <0xNN> pieces of a byte-fallback model, else -1
  // The bytes a token spells before the decoder joins them into UTF-8 (may be part of a character).
  std::string token_bytes(int32_t id) const;
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t unk_id() const { return model_->unk_id(); }
  int32_t pad_id() const { return pad_id_; }

 private:
  JsonTokenizer() = default;
  void read_special_names(const std::filesystem::path& config_file);

  std::unique_ptr<BpeModel> model_;
  AddedTokens added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenDecoder> decoder_;
  bool byte_level_decoder_ = false;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
};

}  // namespace engram
