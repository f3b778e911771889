#include "core/tokenizer/bpe_model.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>

#include "core/tokenizer/utf8_text.h"

namespace engram {

namespace {

// Ids beyond this are a corrupt or hostile file, not a real vocabulary (the largest are ~262k).
constexpr int64_t kMaxVocabularyId = 1 << 24;

bool flag(const nlohmann::json& spec, const char* key) {
  const auto it = spec.find(key);
  return it != spec.end() && !it->is_null() && it->get<bool>();
}

std::string byte_piece_name(int byte) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", byte);
  return name;
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& spec) {
  if (!spec.is_object()) throw std::invalid_argument("model is not an object");
  if (spec.contains("type") && spec.at("type").get<std::string>() != "BPE") {
    throw std::invalid_argument("model type '" + spec.at("type").get<std::string>() +
                                "' is not supported (only BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = spec.find(key);
    if (it != spec.end() && !it->is_null() && !it->get<std::string>().empty()) {
      throw std::invalid_argument(std::string("BPE ") + key + " is not supported");
    }
  }
  const auto dropout = spec.find("dropout");
  if (dropout != spec.end() && !dropout->is_null() && dropout->get<double>() > 0.0) {
    throw std::invalid_argument("BPE dropout is not supported (it makes encoding random)");
  }
  byte_fallback_ = flag(spec, "byte_fallback");
  fuse_unk_ = flag(spec, "fuse_unk");
  ignore_merges_ = flag(spec, "ignore_merges");

  const auto& vocab = spec.at("vocab");
  if (!vocab.is_object()) throw std::invalid_argument("model.vocab is not an object");
  for (const auto& [piece, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= kMaxVocabularyId) {
      throw std::invalid_argument("model.vocab id " + std::to_string(id) + " of '" + piece +
                                  "' is outside [0, " + std::to_string(kMaxVocabularyId) + ")");
    }
    if (static_cast<size_t>(id) >= pieces_.size()) pieces_.resize(static_cast<size_t>(id) + 1);
    if (!pieces_[static_cast<size_t>(id)].empty()) {
      throw std::invalid_argument("model.vocab gives id " + std::to_string(id) + " to both '" +
                                  pieces_[static_cast<size_t>(id)] + "' and '" + piece + "'");
    }
    pieces_[static_cast<size_t>(id)] = piece;
    ids_.emplace(piece, static_cast<int32_t>(id));
  }
  if (ids_.empty()) throw std::invalid_argument("model.vocab is empty");

  const auto& merges = spec.at("merges");
  if (!merges.is_array()) throw std::invalid_argument("model.merges is not an array");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      // Older files: "left right"; a piece never holds a space in these vocabularies.
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos) {
        throw std::invalid_argument("merge " + std::to_string(rank) + " '" + text +
                                    "' is not two pieces separated by a space");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw std::invalid_argument("merge " + std::to_string(rank) +
                                  " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const int32_t left_id = id_of(left), right_id = id_of(right), merged_id = id_of(left + right);
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      const std::string& missing = left_id < 0 ? left : right_id < 0 ? right : left + right;
      throw std::invalid_argument("merge " + std::to_string(rank) + " ('" + left + "', '" + right +
                                  "') refers to '" + missing + "', which is not in the vocabulary");
    }
    // A pair listed twice keeps its last rank: HF collects the merges into a map in order.
    merges_.insert_or_assign(pair_key(left_id, right_id), Merge{rank, merged_id});
    ++rank;
  }

  const auto unk = spec.find("unk_token");
  if (unk != spec.end() && !unk->is_null()) {
    unk_id_ = id_of(unk->get<std::string>());
    if (unk_id_ < 0) {
      throw std::invalid_argument("model.unk_token '" + unk->get<std::string>() +
                                  "' is not in the vocabulary");
    }
  }
  for (int b = 0; b < 256; ++b)
    byte_ids_[b] = byte_fallback_ ? id_of(byte_piece_name(b)) : -1;
}

int32_t BpeModel::id_of(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = id_of(word);
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  // Symbols in a linked list; merges come off a heap ordered by (rank, position) (HF Word).
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, false});
  };
  // An unknown character is held so that a following one can fuse into it (fuse_unk); HF keeps
  // it held across byte-fallback characters too.
  bool unk_pending = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = utf8_char_length(word, pos);
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    const int32_t id = id_of(ch);
    if (id >= 0) {
      if (unk_pending) add(unk_id_);
      unk_pending = false;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : ch)
        all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : ch)
          add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending && !fuse_unk_) add(unk_id_);
      unk_pending = true;
    }
    // Without an unk token HF drops the character.
  }
  if (unk_pending) add(unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank, pos, merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    const auto it = merges_.find(
        pair_key(symbols[static_cast<size_t>(pos)].id, symbols[static_cast<size_t>(next)].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;  // stale entry
    left.id = top.merged_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (!s.removed) ids->push_back(s.id);
  }
}

}  // namespace engram
