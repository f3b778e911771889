#include "core/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "core/tokenizer/unicode_regex.h"
#include "core/tokenizer/utf8_text.h"

namespace engram {

namespace {

class UnicodeFormNormalizer : public Normalizer {
 public:
  explicit UnicodeFormNormalizer(UnicodeForm form) : form_(form) {}
  std::string normalize(std::string text) const override { return unicode_normalize(text, form_); }

 private:
  UnicodeForm form_;
};

// HF prepends only to a non-empty segment.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<UnicodeRegex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(std::string text) const override {
    std::string out;
    size_t last = 0;
    if (regex_) {
      for (const auto& [begin, end] : regex_->find_all(text)) {
        out.append(text, last, begin - last);
        out += content_;
        last = end;
      }
    } else {
      if (literal_.empty()) return text;
      for (size_t at = text.find(literal_); at != std::string::npos;
           at = text.find(literal_, last)) {
        out.append(text, last, at - last);
        out += content_;
        last = at + literal_.size();
      }
    }
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  std::string literal_;
  std::unique_ptr<UnicodeRegex> regex_;
  std::string content_;
};

// ASCII only: full Unicode lowercasing is not used by the families we load.
class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(std::string text) const override {
    for (char& c : text)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return text;
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string text) const override {
    for (const auto& step : steps_)
      text = step->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& spec) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) throw std::invalid_argument("normalizer is not an object");
  const std::string type = spec.at("type").get<std::string>();
  if (type == "NFC") return std::make_unique<UnicodeFormNormalizer>(UnicodeForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeFormNormalizer>(UnicodeForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeFormNormalizer>(UnicodeForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeFormNormalizer>(UnicodeForm::kNFKD);
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(spec.at("prepend").get<std::string>());
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace") {
    const auto& pattern = spec.at("pattern");
    std::string literal;
    std::unique_ptr<UnicodeRegex> regex;
    if (pattern.contains("String")) {
      literal = pattern.at("String").get<std::string>();
    } else {
      regex = std::make_unique<UnicodeRegex>(pattern.at("Regex").get<std::string>());
    }
    return std::make_unique<ReplaceNormalizer>(literal, std::move(regex),
                                               spec.at("content").get<std::string>());
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : spec.at("normalizers")) {
      if (auto parsed = parse_normalizer(step)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  throw std::invalid_argument("normalizer type '" + type +
                              "' is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, "
                              "Lowercase, Sequence)");
}

}  // namespace engram
