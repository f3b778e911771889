// Element types of stored and computed tensors, independent of torch so that parsers and the
// store can name them without torch headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace engram {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element.
size_t dtype_size(DType dtype);
// Safetensors spelling: "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL".
std::string dtype_safetensors_name(DType dtype);
// Parses the safetensors spelling; returns false for anything else.
bool dtype_from_safetensors_name(const std::string& name, DType* out);
// Parses "float32"/"f32", "float16"/"f16"/"half", "bfloat16"/"bf16"; throws std::invalid_argument.
DType dtype_from_name(const std::string& name);
std::string dtype_short_name(DType dtype);  // "f32", "f16", "bf16", ...

}  // namespace engram
