#include "core/model/dtype.h"

#include <stdexcept>

namespace engram {
namespace {

struct DTypeNames {
  DType dtype;
  size_t size;
  const char* safetensors;
  const char* short_name;
};

constexpr DTypeNames kNames[] = {
    {DType::kF32, 4, "F32", "f32"},   {DType::kF16, 2, "F16", "f16"},
    {DType::kBF16, 2, "BF16", "bf16"}, {DType::kF64, 8, "F64", "f64"},
    {DType::kI64, 8, "I64", "i64"},   {DType::kI32, 4, "I32", "i32"},
    {DType::kI16, 2, "I16", "i16"},   {DType::kI8, 1, "I8", "i8"},
    {DType::kU8, 1, "U8", "u8"},      {DType::kBool, 1, "BOOL", "bool"},
};

const DTypeNames& entry(DType dtype) {
  for (const auto& e : kNames) {
    if (e.dtype == dtype) return e;
  }
  throw std::invalid_argument("unknown dtype");
}

}  // namespace

size_t dtype_size(DType dtype) { return entry(dtype).size; }
std::string dtype_safetensors_name(DType dtype) { return entry(dtype).safetensors; }
std::string dtype_short_name(DType dtype) { return entry(dtype).short_name; }

bool dtype_from_safetensors_name(const std::string& name, DType* out) {
  for (const auto& e : kNames) {
    if (name == e.safetensors) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "float") return DType::kF32;
  if (name == "float16" || name == "f16" || name == "half" || name == "fp16") return DType::kF16;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  throw std::invalid_argument("unknown dtype '" + name + "' (f32, bf16, f16)");
}

}  // namespace engram
