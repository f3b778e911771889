#include "core/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/unicode_regex.h"

namespace engram {

namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw std::invalid_argument("split behavior '" + name + "' is not known");
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// HF NormalizedString::split: the matches and the gaps between them cover the text; the behaviour
// decides which go alone, which join a neighbour and which are dropped; empty pieces are dropped.
void split_by_regex(const UnicodeRegex& regex, SplitBehavior behavior, bool invert,
                    const PreToken& piece, std::vector<PreToken>* out) {
  const std::string& text = piece.text;
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& [begin, end] : regex.find_all(text)) {
    if (begin > last) spans.push_back({last, begin, invert});
    spans.push_back({begin, end, !invert});
    last = end;
  }
  if (last < text.size()) spans.push_back({last, text.size(), invert});

  std::vector<Span> merged;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
    case SplitBehavior::kIsolated:
      merged = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (!merged.empty() && s.is_match == previous_match) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
  }
  for (const Span& s : merged) {
    if (behavior == SplitBehavior::kRemoved && s.is_match) continue;
    if (s.end == s.begin) continue;
    out->push_back({text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

// \Q...\E quotes a literal split string (a "\E" inside it is split out of the quote).
std::string quote_literal(const std::string& literal) {
  std::string out = "\\Q";
  size_t last = 0;
  for (size_t at = literal.find("\\E"); at != std::string::npos; at = literal.find("\\E", last)) {
    out += literal.substr(last, at - last) + "\\E\\\\E\\Q";
    last = at + 2;
  }
  return out + literal.substr(last) + "\\E";
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const std::string& pattern, SplitBehavior behavior, bool invert)
      : regex_(pattern), behavior_(behavior), invert_(invert) {}
  std::vector<PreToken> split(std::vector<PreToken> pieces) const override {
    std::vector<PreToken> out;
    for (const auto& piece : pieces)
      split_by_regex(regex_, behavior_, invert_, piece, &out);
    return out;
  }

 private:
  UnicodeRegex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<UnicodeRegex>(kGpt2Pattern);
  }
  std::vector<PreToken> split(std::vector<PreToken> pieces) const override {
    std::vector<PreToken> words;
    for (auto& piece : pieces) {
      if (add_prefix_space_ && !piece.text.starts_with(' ')) piece.text.insert(0, " ");
      if (regex_) {
        split_by_regex(*regex_, SplitBehavior::kIsolated, false, piece, &words);
      } else {
        words.push_back(std::move(piece));
      }
    }
    for (auto& word : words)
      word.text = byte_level_encode(word.text);
    return words;
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<UnicodeRegex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_regex_(split ? std::make_unique<UnicodeRegex>(quote_literal(replacement_))
                           : nullptr) {}
  std::vector<PreToken> split(std::vector<PreToken> pieces) const override {
    std::vector<PreToken> out;
    for (auto& piece : pieces) {
      std::string text;
      for (const char c : piece.text) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text += c;
        }
      }
      const bool prepend =
          !text.starts_with(replacement_) && (scheme_ == PrependScheme::kAlways ||
                                              (scheme_ == PrependScheme::kFirst && piece.at_start));
      if (prepend) text.insert(0, replacement_);
      PreToken replaced{std::move(text), piece.at_start};
      if (split_regex_) {
        split_by_regex(*split_regex_, SplitBehavior::kMergedWithNext, false, replaced, &out);
      } else {
        out.push_back(std::move(replaced));
      }
    }
    return out;
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  std::unique_ptr<UnicodeRegex> split_regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  std::vector<PreToken> split(std::vector<PreToken> pieces) const override {
    for (const auto& step : steps_)
      pieces = step->split(std::move(pieces));
    return pieces;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

bool optional_bool(const nlohmann::json& spec, const char* key, bool fallback) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return fallback;
  return it->get<bool>();
}

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& spec) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) throw std::invalid_argument("pre_tokenizer is not an object");
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Split") {
    const auto& pattern = spec.at("pattern");
    const std::string regex = pattern.contains("String")
                                  ? quote_literal(pattern.at("String").get<std::string>())
                                  : pattern.at("Regex").get<std::string>();
    return std::make_unique<SplitPreTokenizer>(
        regex, parse_behavior(spec.at("behavior").get<std::string>()),
        optional_bool(spec, "invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(optional_bool(spec, "add_prefix_space", true),
                                                   optional_bool(spec, "use_regex", true));
  }
  if (type == "Metaspace") {
    std::string replacement = spec.at("replacement").get<std::string>();
    PrependScheme scheme = PrependScheme::kAlways;
    if (spec.contains("prepend_scheme")) {
      const std::string name = spec.at("prepend_scheme").get<std::string>();
      if (name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        throw std::invalid_argument("Metaspace prepend_scheme '" + name + "' is not known");
      }
    } else if (!optional_bool(spec, "add_prefix_space", true)) {
      scheme = PrependScheme::kNever;  // files written before prepend_scheme existed
    }
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme,
                                                   optional_bool(spec, "split", true));
  }
  if (type == "Digits") {
    const bool individual = optional_bool(spec, "individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(individual ? R"(\p{N})" : R"(\p{N}+)",
                                               SplitBehavior::kIsolated, false);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : spec.at("pretokenizers")) {
      if (auto parsed = parse_pre_tokenizer(step)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  throw std::invalid_argument("pre_tokenizer type '" + type +
                              "' is not supported (Split, ByteLevel, Metaspace, Digits, Sequence)");
}

}  // namespace engram
