// UTF-8 as Hugging Face `tokenizers` (Rust) sees it: code point stepping that survives invalid
// bytes (our encode accepts any bytes; Rust strings cannot hold them), Rust's char::is_whitespace,
// String::from_utf8_lossy's replacement rule, and Unicode normalization forms (ICU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace engram {

// Length of the well-formed UTF-8 character at text[pos], or 1 when the bytes there are not one
// (an invalid byte then counts as a character of its own).
size_t utf8_char_length(std::string_view text, size_t pos);
// The code point at text[pos], or -1 for an invalid byte (see utf8_char_length).
int32_t utf8_code_point(std::string_view text, size_t pos);
void append_utf8(std::string& out, uint32_t code_point);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_unicode_whitespace(int32_t code_point);

// Rust's String::from_utf8_lossy: each maximal ill-formed subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };
// Throws std::runtime_error when ICU fails; invalid UTF-8 runs are left as they are.
std::string unicode_normalize(std::string_view text, UnicodeForm form);

}  // namespace engram
