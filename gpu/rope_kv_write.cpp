#include "gpu/rope_kv_write.h"

#include <stdexcept>
#include <string>

namespace engram::gpu {
namespace {

at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

void check_rows(const at::Tensor& t, const char* name, int64_t d) {
  if (t.dim() != 2 || t.size(1) != d || t.stride(1) != 1 || t.stride(0) != d) {
    throw std::invalid_argument(std::string("rope_kv_write: ") + name + " must be [heads, " +
                                std::to_string(d) + "] with contiguous rows");
  }
}

}  // namespace

void rope_kv_write_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slot,
                             at::Tensor& q_out, at::Tensor& key_cache, at::Tensor& value_cache) {
  q_out.copy_(rotate(q, cos, sin));
  key_cache.index_copy_(1, slot, rotate(k, cos, sin).unsqueeze(1));
  value_cache.index_copy_(1, slot, v.unsqueeze(1));
}

void rope_kv_write(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slot,
                   at::Tensor& q_out, at::Tensor& key_cache, at::Tensor& value_cache) {
  const int64_t d = q.size(-1);
  if (d % 2 != 0) throw std::invalid_argument("rope_kv_write: head_dim must be even");
  check_rows(q, "q", d);
  check_rows(k, "k", d);
  check_rows(v, "v", d);
  if (cos.numel() != d || sin.numel() != d || slot.numel() != 1) {
    throw std::invalid_argument("rope_kv_write: cos/sin must be [head_dim] and slot [1]");
  }
  if (!q_out.is_contiguous() || q_out.sizes() != q.sizes() || !key_cache.is_contiguous() ||
      !value_cache.is_contiguous() || key_cache.dim() != 3 || key_cache.size(0) != k.size(0) ||
      key_cache.size(2) != d || value_cache.sizes() != key_cache.sizes()) {
    throw std::invalid_argument(
        "rope_kv_write: outputs must be contiguous [hq, d] and "
        "[hkv, capacity, d]");
  }
#ifdef ENGRAM_WITH_CUDA
  if (q.is_cuda()) {
    rope_kv_write_cuda(q, k, v, cos.contiguous(), sin.contiguous(), slot, q_out, key_cache,
                       value_cache);
    return;
  }
#endif
  rope_kv_write_reference(q, k, v, cos.reshape({d}), sin.reshape({d}), slot.reshape({1}), q_out,
                          key_cache, value_cache);
}

}  // namespace engram::gpu
