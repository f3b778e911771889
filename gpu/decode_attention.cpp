#include "gpu/decode_attention.h"

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace engram::gpu {
namespace {

void check_shapes(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                  const at::Tensor& key_positions, const at::Tensor& key_valid,
                  const at::Tensor& positions, const at::Tensor& last_slots) {
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("decode_attention: " + what);
  };
  if (q.dim() != 3 || keys.dim() != 4 || values.sizes() != keys.sizes())
    fail("q must be [R, Hq, d], keys and values [R, Hkv, C, d]");
  const int64_t rows = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t hkv = keys.size(1), slots = keys.size(2);
  if (keys.size(0) != rows || keys.size(3) != d || hkv == 0 || hq % hkv != 0)
    fail("q and keys differ in rows or head_dim, or Hq is not a multiple of Hkv");
  if (keys.scalar_type() != q.scalar_type() || values.scalar_type() != q.scalar_type())
    fail("q, keys and values must have one dtype");
  if (key_positions.defined() && (key_positions.sizes() != at::IntArrayRef{rows, slots} ||
                                  key_positions.scalar_type() != at::kLong))
    fail("key_positions must be int64 [R, C]");
  if (key_valid.defined() && (key_valid.sizes() != at::IntArrayRef{rows, hkv, slots} ||
                              key_valid.scalar_type() != at::kBool))
    fail("key_valid must be bool [R, Hkv, C]");
  if (positions.numel() != rows || last_slots.numel() != rows ||
      positions.scalar_type() != at::kLong || last_slots.scalar_type() != at::kLong)
    fail("positions and last_slots must be int64 [R]");
}

}  // namespace

at::Tensor decode_attention_reference(const at::Tensor& q, const at::Tensor& keys,
                                      const at::Tensor& values, const at::Tensor& key_positions,
                                      const at::Tensor& key_valid, const at::Tensor& positions,
                                      const at::Tensor& last_slots, int64_t window, double scale) {
  const int64_t rows = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t hkv = keys.size(1), slots = keys.size(2), g = hq / hkv;
  const at::Tensor qf = q.to(at::kFloat).reshape({rows, hkv, g, d});
  at::Tensor scores = at::matmul(qf, keys.to(at::kFloat).transpose(-1, -2)) * scale;  // [R,Hkv,g,C]
  const at::Tensor slot = at::arange(slots, last_slots.options()).view({1, slots});
  at::Tensor seen = slot.le(last_slots.reshape({rows, 1}));  // [R, C]
  if (key_positions.defined()) {
    const at::Tensor pos = positions.reshape({rows, 1}).to(key_positions.device());
    seen = seen.logical_and(key_positions.ge(0)).logical_and(key_positions.le(pos));
    if (window > 0) seen = seen.logical_and(key_positions.gt(pos - window));
  }
  seen = seen.view({rows, 1, 1, slots});
  if (key_valid.defined()) seen = seen.logical_and(key_valid.view({rows, hkv, 1, slots}));
  scores.masked_fill_(seen.logical_not(), -std::numeric_limits<float>::infinity());
  // A softmax that gives a row seeing nothing zeros (the kernel's partial sums do the same).
  at::Tensor m = scores.amax(-1, /*keepdim=*/true);
  m.masked_fill_(m.isinf(), 0.0);
  const at::Tensor p = (scores - m).exp();
  const at::Tensor l = p.sum(-1, /*keepdim=*/true);
  // Unseen slots weigh nothing, whatever they hold (a never-written slot may hold NaN).
  const at::Tensor v = at::where(seen.transpose(-1, -2), values.to(at::kFloat), 0.0);
  const at::Tensor out = at::matmul(p, v) / at::where(l.gt(0), l, at::ones_like(l));
  return out.reshape({rows, hq, d}).to(q.scalar_type());
}

bool decode_attention_kernel_fits(const at::Tensor& q, const at::Tensor& keys,
                                  const at::Tensor& values, const at::Tensor& key_positions,
                                  const at::Tensor& key_valid) {
  if (!q.is_cuda() || !keys.is_cuda() || !values.is_cuda()) return false;
  const int64_t d = q.size(2), g = q.size(1) / keys.size(1);
  const bool f32 = q.scalar_type() == at::kFloat;
  if (!(f32 || q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf)) return false;
  if (!(d == 64 || d == 128 || (d == 256 && !f32)) || g > 8) return false;
  // 16-byte loads: every head's rows start at a multiple of 16 bytes.
  const auto aligned = [](const at::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 &&
           (t.stride(0) * t.element_size()) % 16 == 0 && (t.stride(1) * t.element_size()) % 16 == 0;
  };
  for (const at::Tensor* t : {&keys, &values}) {
    if (t->stride(3) != 1 || t->stride(2) != d || !aligned(*t)) return false;
  }
  if (q.is_contiguous() && !aligned(q)) return false;  // else the kernel takes a fresh copy
  if (key_positions.defined() && (!key_positions.is_cuda() || key_positions.stride(1) != 1))
    return false;
  if (key_valid.defined() && (!key_valid.is_cuda() || key_valid.stride(2) != 1)) return false;
  return true;
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& key_positions, const at::Tensor& key_valid,
                            const at::Tensor& positions, const at::Tensor& last_slots,
                            int64_t window, double scale) {
  check_shapes(q, keys, values, key_positions, key_valid, positions, last_slots);
#ifdef ENGRAM_WITH_CUDA
  if (positions.is_cuda() && last_slots.is_cuda() &&
      decode_attention_kernel_fits(q, keys, values, key_positions, key_valid)) {
    return decode_attention_cuda(q, keys, values, key_positions, key_valid, positions, last_slots,
                                 window, scale);
  }
#endif
  return decode_attention_reference(q, keys, values, key_positions, key_valid, positions,
                                    last_slots, window, scale);
}

}  // namespace engram::gpu
