#include "gpu/decode_linear.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/env_flag.h"
#include "gpu/rms_norm.h"
#include "gpu/silu_mul.h"

namespace engram::gpu {
namespace {

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Bytes of normalized input rows a block holds in shared memory: under the 48 KiB a launch may
// ask for without opting in, less the block reduction's static words (8 rows of K = 3,072 at
// 48 KiB were refused: "invalid argument", H100, 2026-11-27).
constexpr int64_t kNormSharedBytes = 47 * 1024;

#ifdef ENGRAM_WITH_CUDA
bool operand_fits(const at::Tensor& t, at::ScalarType type, int64_t numel) {
  return t.is_cuda() && t.scalar_type() == type && t.numel() == numel && t.is_contiguous() &&
         aligned16(t);
}
#endif

}  // namespace

bool decode_linear_kernel_fits(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                               const DecodeLinearFusion& fusion) {
#ifdef ENGRAM_WITH_CUDA
  // ENGRAM_CUBLAS_DECODE=1: cuBLAS for every row, the kernel's peer in the same benchmark run;
  // ENGRAM_UNFUSED_DECODE=1: the folded steps as their own kernels (the fusion's peer).
  static const bool cublas_only = env_flag("ENGRAM_CUBLAS_DECODE");
  static const bool unfused = env_flag("ENGRAM_UNFUSED_DECODE");
  if (cublas_only || (unfused && fusion.folds())) return false;
  if (!x.is_cuda() || !w.is_cuda() || w.dim() != 2 || x.dim() < 1) return false;
  const at::ScalarType t = x.scalar_type();
  if ((t != at::kBFloat16 && t != at::kHalf) || w.scalar_type() != t) return false;
  const int64_t k = w.size(1), n = w.size(0);
  if (x.size(-1) != k || k % 8 != 0 || k == 0 || n == 0) return false;
  const int64_t rows = x.numel() / k;
  if (rows > kDecodeLinearMaxRows || x.numel() == 0) return false;
  if (!w.is_contiguous() || !aligned16(w) || !x.is_contiguous() || !aligned16(x)) return false;
  if (bias.defined() &&
      (!bias.is_cuda() || bias.scalar_type() != t || bias.numel() != n || !bias.is_contiguous()))
    return false;
  if (fusion.norm_weight.defined() &&
      (!operand_fits(fusion.norm_weight, t, k) || rows * k * x.element_size() > kNormSharedBytes))
    return false;
  if (fusion.glu_inter < 0 || (fusion.glu_inter > 0 && n != 2 * fusion.glu_inter)) return false;
  const int64_t outputs = fusion.glu_inter > 0 ? fusion.glu_inter : n;
  if (fusion.residual.defined() && !operand_fits(fusion.residual, t, rows * outputs)) return false;
  return true;
#else
  (void)x;
  (void)w;
  (void)bias;
  (void)fusion;
  return false;
#endif
}

at::Tensor decode_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                         const DecodeLinearFusion& fusion) {
  const int64_t outputs = fusion.glu_inter > 0 ? fusion.glu_inter : w.size(0);
#ifdef ENGRAM_WITH_CUDA
  if (decode_linear_kernel_fits(x, w, bias, fusion)) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = outputs;
    return decode_linear_cuda(x.reshape({-1, w.size(1)}), w, bias, fusion).view(shape);
  }
#endif
  if (!fusion.folds()) return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
  // The steps one at a time, as the fused kernel's bits are defined.
  const at::Tensor in =
      fusion.norm_weight.defined() ? rms_norm(x, fusion.norm_weight, fusion.norm_eps) : x;
  at::Tensor y = decode_linear(in, w, bias);
  if (fusion.glu_inter > 0) y = silu_mul(y, fusion.glu_inter);
  return fusion.residual.defined() ? fusion.residual + y : y;
}

}  // namespace engram::gpu
