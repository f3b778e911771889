#include "core/runtime/device.h"

#include <stdexcept>

#include <ATen/Context.h>

namespace engram {

bool cuda_available() {
  return at::hasCUDA();
}

DeviceChoice choose_device(const std::string& device, const std::string& dtype) {
  DeviceChoice choice;
  if (device == "auto") {
    choice.device = cuda_available() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  } else if (device == "cpu") {
    choice.device = at::kCPU;
  } else if (device.rfind("cuda", 0) == 0) {
    if (!cuda_available()) {
      throw std::runtime_error(
          "--device " + device +
          ": CUDA is not available here (no GPU visible, or libtorch built for the CPU only); "
          "use --device cpu");
    }
    choice.device = at::Device(device);
  } else {
    throw std::runtime_error("unknown device '" + device + "' (cpu, cuda, cuda:N, auto)");
  }
  const bool on_cpu = choice.device.is_cpu();
  if (dtype == "auto") {
    choice.compute_dtype = on_cpu ? at::kFloat : at::kBFloat16;
  } else {
    choice.compute_dtype = to_scalar_type(dtype_from_name(dtype));
    if (on_cpu && choice.compute_dtype != at::kFloat) {
      // Half-precision matmuls on the CPU are slow or missing in libtorch 1.13.
      throw std::runtime_error("--dtype " + dtype + " is for CUDA; the CPU runs f32");
    }
    if (choice.compute_dtype != at::kFloat && choice.compute_dtype != at::kBFloat16 &&
        choice.compute_dtype != at::kHalf) {
      throw std::runtime_error("--dtype " + dtype + " cannot be computed in (f32, bf16, f16)");
    }
  }
  return choice;
}

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return at::kFloat;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kF64:
      return at::kDouble;
    case DType::kI64:
      return at::kLong;
    case DType::kI32:
      return at::kInt;
    case DType::kI16:
      return at::kShort;
    case DType::kI8:
      return at::kChar;
    case DType::kU8:
      return at::kByte;
    case DType::kBool:
      return at::kBool;
  }
  throw std::invalid_argument("unknown dtype");
}

DType from_scalar_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DType::kF32;
    case at::kHalf:
      return DType::kF16;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kDouble:
      return DType::kF64;
    case at::kLong:
      return DType::kI64;
    case at::kInt:
      return DType::kI32;
    case at::kShort:
      return DType::kI16;
    case at::kChar:
      return DType::kI8;
    case at::kByte:
      return DType::kU8;
    case at::kBool:
      return DType::kBool;
    default:
      throw std::invalid_argument("unsupported scalar type");
  }
}

}  // namespace engram
