#include "core/tokenizer/utf8_text.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <stdexcept>
#include <vector>

namespace engram {

namespace {

// Bounds of the second byte after a lead byte (Unicode Table 3-7, well-formed byte sequences).
bool second_byte_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

int expected_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // never a lead byte
}

// How many bytes at text[pos] form the longest prefix of a well-formed sequence (its "maximal
// subpart"), and whether that prefix is a whole character.
size_t maximal_subpart(std::string_view text, size_t pos, bool* complete) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  const int want = expected_length(lead);
  *complete = want == 1;
  if (want <= 1) return 1;
  size_t n = 1;
  while (n < static_cast<size_t>(want) && pos + n < text.size()) {
    const auto b = static_cast<unsigned char>(text[pos + n]);
    const bool ok = n == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  *complete = n == static_cast<size_t>(want);
  return n;
}

}  // namespace

size_t utf8_char_length(std::string_view text, size_t pos) {
  bool complete = false;
  const size_t n = maximal_subpart(text, pos, &complete);
  return complete ? n : 1;
}

int32_t utf8_code_point(std::string_view text, size_t pos) {
  bool complete = false;
  const size_t n = maximal_subpart(text, pos, &complete);
  if (!complete) return -1;
  const auto b = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(text[pos + i]));
  };
  switch (n) {
    case 1:
      return static_cast<int32_t>(b(0));
    case 2:
      return static_cast<int32_t>(((b(0) & 0x1F) << 6) | (b(1) & 0x3F));
    case 3:
      return static_cast<int32_t>(((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F));
    default:
      return static_cast<int32_t>(((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) |
                                  ((b(2) & 0x3F) << 6) | (b(3) & 0x3F));
  }
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_unicode_whitespace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    const size_t n = maximal_subpart(bytes, pos, &complete);
    if (complete) {
      out.append(bytes.substr(pos, n));
    } else {
      out += "\xEF\xBF\xBD";
    }
    pos += n;
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    pos += maximal_subpart(bytes, pos, &complete);
    if (!complete) return false;
  }
  return true;
}

std::string unicode_normalize(std::string_view text, UnicodeForm form) {
  bool ascii = true;
  for (const char c : text)
    ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // every ASCII string is in all four forms
  if (!is_valid_utf8(text)) {
    // Normalize the valid runs; the invalid bytes stay where they are.
    std::string out;
    size_t run = 0, pos = 0;
    while (pos < text.size()) {
      bool complete = false;
      const size_t n = maximal_subpart(text, pos, &complete);
      if (!complete) {
        out += unicode_normalize(text.substr(run, pos - run), form);
        out.append(text.substr(pos, n));
        run = pos + n;
      }
      pos += n;
    }
    out += unicode_normalize(text.substr(run), form);
    return out;
  }
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = nullptr;
  switch (form) {
    case UnicodeForm::kNFC:
      normalizer = unorm2_getNFCInstance(&status);
      break;
    case UnicodeForm::kNFD:
      normalizer = unorm2_getNFDInstance(&status);
      break;
    case UnicodeForm::kNFKC:
      normalizer = unorm2_getNFKCInstance(&status);
      break;
    case UnicodeForm::kNFKD:
      normalizer = unorm2_getNFKDInstance(&status);
      break;
  }
  if (U_FAILURE(status)) throw std::runtime_error("ICU normalizer unavailable");
  int32_t u16_len = 0;
  u_strFromUTF8(nullptr, 0, &u16_len, text.data(), static_cast<int32_t>(text.size()), &status);
  status = U_ZERO_ERROR;
  std::vector<UChar> source(static_cast<size_t>(u16_len) + 1);
  u_strFromUTF8(source.data(), u16_len + 1, nullptr, text.data(), static_cast<int32_t>(text.size()),
                &status);
  if (U_FAILURE(status)) throw std::runtime_error("ICU could not read UTF-8");
  // Decomposition can grow the text (up to 18x in NFKD for a few code points).
  std::vector<UChar> dest(static_cast<size_t>(u16_len) * 4 + 16);
  int32_t n = unorm2_normalize(normalizer, source.data(), u16_len, dest.data(),
                               static_cast<int32_t>(dest.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    dest.resize(static_cast<size_t>(n) + 1);
    n = unorm2_normalize(normalizer, source.data(), u16_len, dest.data(),
                         static_cast<int32_t>(dest.size()), &status);
  }
  if (U_FAILURE(status)) throw std::runtime_error("ICU normalization failed");
  int32_t out_len = 0;
  u_strToUTF8(nullptr, 0, &out_len, dest.data(), n, &status);
  status = U_ZERO_ERROR;
  std::string out(static_cast<size_t>(out_len), '\0');
  u_strToUTF8(out.data(), out_len, nullptr, dest.data(), n, &status);
  if (U_FAILURE(status) && status != U_STRING_NOT_TERMINATED_WARNING) {
    throw std::runtime_error("ICU could not write UTF-8");
  }
  return out;
}

}  // namespace engram
