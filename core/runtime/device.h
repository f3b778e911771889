// Choosing where the model runs. `--device cuda` on a machine without CUDA is an error that says
// so, never a silent fallback to the CPU (style rule 7).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "core/model/dtype.h"

namespace engram {

struct DeviceChoice {
  at::Device device = at::kCPU;
  at::ScalarType compute_dtype = at::kFloat;
};

// device: "cpu", "cuda", "cuda:N" or "auto" (CUDA when available). dtype: "auto" (bf16 on CUDA,
// f32 on CPU), "f32", "bf16", "f16". Throws std::runtime_error with the reason.
DeviceChoice choose_device(const std::string& device, const std::string& dtype);

bool cuda_available();
at::ScalarType to_scalar_type(DType dtype);
DType from_scalar_type(at::ScalarType type);

}  // namespace engram
