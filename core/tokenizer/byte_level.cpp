#include "core/tokenizer/byte_level.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "core/tokenizer/utf8_text.h"

namespace engram {

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> char_of_byte;
  std::unordered_map<int32_t, unsigned char> byte_of_char;
  ByteLevelTables() {
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to 256 + n in order.
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int32_t cp = printable ? b : 256 + shifted++;
      append_utf8(char_of_byte[static_cast<size_t>(b)], static_cast<uint32_t>(cp));
      byte_of_char[cp] = static_cast<unsigned char>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes)
    out += t.char_of_byte[static_cast<unsigned char>(c)];
  return out;
}

bool byte_level_decode(std::string_view token, std::string* out) {
  const auto& t = tables();
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    const auto it = t.byte_of_char.find(utf8_code_point(token, pos));
    if (it == t.byte_of_char.end()) return false;
    bytes += static_cast<char>(it->second);
    pos += utf8_char_length(token, pos);
  }
  *out += bytes;
  return true;
}

}  // namespace engram
