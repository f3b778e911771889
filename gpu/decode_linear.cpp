#include "gpu/decode_linear.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace engram::gpu {
namespace {

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

}  // namespace

bool decode_linear_kernel_fits(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
#ifdef ENGRAM_WITH_CUDA
  // ENGRAM_CUBLAS_DECODE=1: cuBLAS for every row, the kernel's peer in the same benchmark run.
  static const bool cublas_only = [] {
    const char* v = std::getenv("ENGRAM_CUBLAS_DECODE");
    return v != nullptr && std::string(v) == "1";
  }();
  if (cublas_only) return false;
  if (!x.is_cuda() || !w.is_cuda() || w.dim() != 2 || x.dim() < 1) return false;
  const at::ScalarType t = x.scalar_type();
  if ((t != at::kBFloat16 && t != at::kHalf) || w.scalar_type() != t) return false;
  const int64_t k = w.size(1);
  if (x.size(-1) != k || k % 8 != 0 || k == 0 || w.size(0) == 0) return false;
  if (x.numel() / k > kDecodeLinearMaxRows || x.numel() == 0) return false;
  if (!w.is_contiguous() || !aligned16(w) || !x.is_contiguous() || !aligned16(x)) return false;
  if (bias.defined() && (!bias.is_cuda() || bias.scalar_type() != t || bias.numel() != w.size(0) ||
                         !bias.is_contiguous()))
    return false;
  return true;
#else
  (void)x;
  (void)w;
  (void)bias;
  return false;
#endif
}

at::Tensor decode_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
#ifdef ENGRAM_WITH_CUDA
  if (decode_linear_kernel_fits(x, w, bias)) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return decode_linear_cuda(x.reshape({-1, w.size(1)}), w, bias).view(shape);
  }
#endif
  return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
}

}  // namespace engram::gpu
