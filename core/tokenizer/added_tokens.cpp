#include "core/tokenizer/added_tokens.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/tokenizer/utf8_text.h"

namespace engram {

namespace {

bool flag(const nlohmann::json& entry, const char* key) {
  const auto it = entry.find(key);
  return it != entry.end() && !it->is_null() && it->get<bool>();
}

// Start of the whitespace run that ends at `end` (Rust's char::is_whitespace).
size_t whitespace_before(std::string_view text, size_t end, size_t floor) {
  size_t begin = end;
  while (begin > floor) {
    size_t prev = begin - 1;
    while (prev > floor && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80)
      --prev;
    if (!is_unicode_whitespace(utf8_code_point(text, prev))) break;
    begin = prev;
  }
  return begin;
}

size_t whitespace_after(std::string_view text, size_t begin) {
  size_t end = begin;
  while (end < text.size() && is_unicode_whitespace(utf8_code_point(text, end)))
    end += utf8_char_length(text, end);
  return end;
}

}  // namespace

AddedTokens::AddedTokens(const nlohmann::json& spec, int64_t max_id) {
  if (spec.is_null()) return;
  if (!spec.is_array()) throw std::invalid_argument("added_tokens is not an array");
  for (const auto& entry : spec) {
    AddedToken token;
    const int64_t id = entry.at("id").get<int64_t>();
    if (id < 0 || id >= max_id) {
      throw std::invalid_argument("added token id " + std::to_string(id) + " is outside [0, " +
                                  std::to_string(max_id) + ")");
    }
    token.id = static_cast<int32_t>(id);
    token.content = entry.at("content").get<std::string>();
    if (token.content.empty()) {
      throw std::invalid_argument("added token " + std::to_string(id) + " has empty content");
    }
    token.special = flag(entry, "special");
    token.lstrip = flag(entry, "lstrip");
    token.rstrip = flag(entry, "rstrip");
    token.single_word = flag(entry, "single_word");
    token.normalized = flag(entry, "normalized");
    by_id_[token.id] = tokens_.size();
    by_content_[token.content] = tokens_.size();
    tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

const AddedToken* AddedTokens::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedTokens::find(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

std::vector<TextSegment> AddedTokens::split(std::string_view text) const {
  std::vector<TextSegment> out;
  size_t text_begin = 0;  // start of the text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const size_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      if (text.compare(pos, tokens_[i].content.size(), tokens_[i].content) == 0) {
        match = &tokens_[i];
        break;
      }
    }
    if (!match) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + match->content.size();
    if (match->lstrip) begin = whitespace_before(text, begin, text_begin);
    if (match->rstrip) end = whitespace_after(text, end);
    if (begin > text_begin)
      out.push_back({-1, text.substr(text_begin, begin - text_begin), text_begin});
    out.push_back({match->id, text.substr(begin, end - begin), begin});
    text_begin = pos = end;
  }
  if (text_begin < text.size()) out.push_back({-1, text.substr(text_begin), text_begin});
  return out;
}

}  // namespace engram
