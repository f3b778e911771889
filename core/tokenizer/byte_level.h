// GPT-2's byte-to-character map, used by byte-level BPE (GPT-2, Llama-3, Qwen2, tekken): every byte
// is spelled by one printable code point, so any byte string is a string of vocabulary characters.
#pragma once

#include <string>
#include <string_view>

namespace engram {

// Each byte of `bytes` as its byte-level character (UTF-8 encoded).
std::string byte_level_encode(std::string_view bytes);
// The bytes a byte-level token stands for; false (out untouched) when a character of `token` is not
// one of the 256 byte-level characters.
bool byte_level_decode(std::string_view token, std::string* out);

}  // namespace engram
