// tokenizer.json "model" of type BPE: a vocabulary and ranked merges, applied to one pre-token at
// a time exactly as Hugging Face `tokenizers` does (lowest rank first, leftmost among equals),
// with its options: ignore_merges (Llama-3: a word in the vocabulary is one token), byte_fallback
// (Llama-2/Mistral: an unknown character becomes its <0xNN> byte pieces) and fuse_unk.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace engram {

class BpeModel {
 public:
  // Throws std::invalid_argument naming what is wrong: a merge with a token the vocabulary lacks,
  // duplicate ids, an unsupported option.
  explicit BpeModel(const nlohmann::json& spec);

  // Appends the ids of one pre-token (already byte-level encoded where the family does that).
  void tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  // One past the largest id in the vocabulary.
  int32_t id_bound() const { return static_cast<int32_t>(pieces_.size()); }
  // "" for an id with no vocabulary entry.
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  int32_t id_of(std::string_view piece) const;  // -1 when absent
  int32_t unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> pieces_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace engram
