#include "core/tokenizer/token_decoder.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/utf8_text.h"

namespace engram {

namespace {

constexpr const char* kReplacementCharacter = "\xEF\xBF\xBD";

class ByteLevelDecoder : public TokenDecoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const auto& token : tokens) {
      // A token with other characters (an added token) stands for its own UTF-8.
      if (!byte_level_decode(token, &bytes)) bytes += token;
    }
    return {utf8_lossy(bytes)};
  }
};

int byte_piece_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

class ByteFallbackDecoder : public TokenDecoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_length = 0;
    auto flush = [&] {
      if (run_length == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_length; ++i)
          out.emplace_back(kReplacementCharacter);
      }
      run.clear();
      run_length = 0;
    };
    for (auto& token : tokens) {
      const int value = byte_piece_value(token);
      if (value >= 0) {
        run += static_cast<char>(value);
        ++run_length;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder : public TokenDecoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& token : tokens)
      all += token;
    return {all};
  }
};

class ReplaceDecoder : public TokenDecoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    if (pattern_.empty()) return tokens;
    for (auto& token : tokens) {
      std::string out;
      size_t last = 0;
      for (size_t at = token.find(pattern_); at != std::string::npos;
           at = token.find(pattern_, last)) {
        out.append(token, last, at - last);
        out += content_;
        last = at + pattern_.size();
      }
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
    return tokens;
  }

 private:
  std::string pattern_, content_;
};

// Up to `start` leading and `stop` trailing characters equal to `content`, per token.
class StripDecoder : public TokenDecoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) {
      size_t begin = 0;
      for (size_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0 &&
                         begin < token.size();
           ++i)
        begin += content_.size();
      size_t end = token.size();
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      token = token.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// HF drops every replacement character of the first token (not only the leading one) unless the
// prepend scheme is "never"; elsewhere each becomes a space.
class MetaspaceDecoder : public TokenDecoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string with = (i == 0 && drop_first_) ? "" : " ";
      std::string out;
      const std::string& token = tokens[i];
      size_t last = 0;
      for (size_t at = token.find(replacement_); at != std::string::npos;
           at = token.find(replacement_, last)) {
        out.append(token, last, at - last);
        out += with;
        last = at + replacement_.size();
      }
      out.append(token, last, std::string::npos);
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

class SequenceDecoder : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> steps)
      : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_)
      tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

std::string single_character(const nlohmann::json& value, const char* what) {
  std::string s = value.get<std::string>();
  if (s.empty() || utf8_char_length(s, 0) != s.size()) {
    throw std::invalid_argument(std::string(what) + " '" + s + "' is not one character");
  }
  return s;
}

}  // namespace

std::unique_ptr<TokenDecoder> parse_token_decoder(const nlohmann::json& spec) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) throw std::invalid_argument("decoder is not an object");
  const std::string type = spec.at("type").get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    const auto& pattern = spec.at("pattern");
    if (!pattern.contains("String")) {
      throw std::invalid_argument("Replace decoder: only a String pattern is supported");
    }
    return std::make_unique<ReplaceDecoder>(pattern.at("String").get<std::string>(),
                                            spec.at("content").get<std::string>());
  }
  if (type == "Strip") {
    const int64_t start = spec.at("start").get<int64_t>(), stop = spec.at("stop").get<int64_t>();
    if (start < 0 || stop < 0 || start > 1024 || stop > 1024) {
      throw std::invalid_argument("Strip decoder: start/stop out of range");
    }
    return std::make_unique<StripDecoder>(single_character(spec.at("content"), "Strip content"),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Metaspace") {
    bool drop_first = true;
    if (spec.contains("prepend_scheme")) {
      drop_first = spec.at("prepend_scheme").get<std::string>() != "never";
    } else if (spec.contains("add_prefix_space")) {
      drop_first = spec.at("add_prefix_space").get<bool>();
    }
    return std::make_unique<MetaspaceDecoder>(
        single_character(spec.at("replacement"), "Metaspace replacement"), drop_first);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    for (const auto& step : spec.at("decoders")) {
      if (auto parsed = parse_token_decoder(step)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  throw std::invalid_argument("decoder type '" + type +
                              "' is not supported (ByteLevel, ByteFallback, Fuse, Replace, Strip, "
                              "Metaspace, Sequence)");
}

}  // namespace engram
