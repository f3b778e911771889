#include "gpu/louiskv_scoring.h"

#include <cmath>
#include <stdexcept>

#include "gpu/env_flag.h"

namespace engram::gpu {
namespace {

void check_decide(const at::Tensor& q, const at::Tensor& previous, const at::Tensor& step,
                  const at::Tensor& decision) {
  if (q.dim() != 2 || previous.sizes() != q.sizes() || previous.scalar_type() != at::kFloat)
    throw std::invalid_argument("louiskv_decide: q [Hq, d] and previous [Hq, d] f32");
  if (step.numel() != 1 || step.scalar_type() != at::kLong || step.device() != q.device())
    throw std::invalid_argument("louiskv_decide: step is one int64 beside q");
  if (decision.numel() != 2 || decision.scalar_type() != at::kFloat ||
      decision.device() != q.device() || previous.device() != q.device())
    throw std::invalid_argument("louiskv_decide: decision is [2] f32 beside q");
}

void check_layer_tau(const at::Tensor& q, const LayerTau* layer_tau) {
  if (layer_tau &&
      (layer_tau->threshold.numel() != 1 || layer_tau->threshold.scalar_type() != at::kFloat ||
       layer_tau->threshold.device() != q.device()))
    throw std::invalid_argument("louiskv_decide: a layer's τ is one f32 beside q");
}

void check_scores(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live) {
  if (q.dim() != 2 || index.dim() != 3 || index.size(2) != q.size(1) || index.size(0) == 0 ||
      q.size(0) % index.size(0) != 0 || !at::isFloatingType(index.scalar_type()))
    throw std::invalid_argument("louiskv_scores: q [g·H, d] and index [H, U, d] float");
  if (live.defined() && (live.dim() != 1 || live.size(0) != index.size(1) ||
                         live.scalar_type() != at::kBool || live.device() != index.device()))
    throw std::invalid_argument("louiskv_scores: live is [U] bool beside the index");
}

}  // namespace

void louiskv_decide_reference(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step,
                              double tau, int64_t stride, at::Tensor& decision,
                              const LayerTau* layer_tau) {
  check_layer_tau(q, layer_tau);
  const at::Tensor current = q.to(at::kFloat);
  const at::Tensor r = at::cosine_similarity(current, previous, 1).mean();
  const at::Tensor now = step.reshape(at::IntArrayRef{});  // (view({}) would be a dtype view)
  const at::Tensor limit =
      layer_tau ? layer_tau->threshold.reshape(at::IntArrayRef{}) : at::Tensor();
  const at::Tensor below = layer_tau ? r.lt(limit) : r.lt(tau);
  const at::Tensor boundary = stride > 0 ? now.remainder(stride).eq(0) : below;
  decision.select(0, 0).copy_(boundary.logical_or(now.eq(0)));
  decision.select(0, 1).copy_(r);
  previous.copy_(current);
  if (layer_tau && stride == 0) {
    // One f32 add of the step chosen on the host, as the kernel does: both paths keep equal bits.
    const at::Tensor moved = (limit + at::where(below, at::full({}, layer_tau->down, r.options()),
                                                at::full({}, layer_tau->up, r.options())))
                                 .clamp(-1.0, kLayerTauCeiling);
    layer_tau->threshold.copy_(at::where(now.gt(0), moved, limit).reshape({1}));
  }
}

at::Tensor louiskv_scores_reference(const at::Tensor& q, const at::Tensor& index,
                                    const at::Tensor& live) {
  check_scores(q, index, live);
  const int64_t heads = index.size(0), d = q.size(1);
  const at::Tensor grouped = q.to(at::kFloat).view({heads, -1, d});  // [H, g, d]
  // A bf16 index (kept in the keys' dtype to halve its device bytes) is scored in f32: the
  // upcast is a transient of one layer.
  const at::Tensor units = index.to(at::kFloat);
  const double scale = 1.0 / std::sqrt(double(d));
  // On CUDA one GEMM with the 1/√d folded in (beta 0: cuBLAS does not read the first operand).
  // libtorch 1.13's CPU baddbmm does read its uninitialised result at beta 0 (0 x NaN garbage made
  // some scores NaN and the selection depend on the allocation), so the CPU scales afterwards.
  at::Tensor logits =
      units.is_cuda()
          ? at::baddbmm(at::empty({heads, grouped.size(1), units.size(1)}, units.options()),
                        grouped, units.transpose(1, 2), 0.0, scale)
          : at::bmm(grouped, units.transpose(1, 2)).mul_(scale);
  // Callers keep at least one unit live, so no softmax is over -inf alone.
  if (live.defined()) logits = at::where(live, logits, -INFINITY);
  return logits.softmax(-1).mean(1);  // [H, U]
}

at::Tensor louiskv_scores(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                          const at::Tensor& enabled) {
  check_scores(q, index, live);
  if (enabled.defined() && (enabled.numel() != 1 || enabled.scalar_type() != at::kBool ||
                            enabled.device() != index.device()))
    throw std::invalid_argument("louiskv_scores: `enabled` is one bool beside the index");
#ifdef ENGRAM_WITH_CUDA
  const auto kernel_dtype = [](at::ScalarType t) {
    return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
  };
  const int64_t d = q.size(1), group = q.size(0) / index.size(0);
  static const bool torch_scores = env_flag("ENGRAM_TORCH_SCORES");  // the peer in benchmarks
  if (index.is_cuda() && !torch_scores && q.device() == index.device() &&
      kernel_dtype(q.scalar_type()) && kernel_dtype(index.scalar_type()) &&
      group <= kMaxScoreGroup && d <= 512 && q.is_contiguous() && index.stride(2) == 1 &&
      index.stride(1) == d && (!live.defined() || live.is_contiguous()))
    return louiskv_scores_cuda(q, index, live, enabled);
#endif
  // The reference scores whatever `enabled` says: the scores are then unspecified anyway.
  return louiskv_scores_reference(q, index, live);
}

void louiskv_decide(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step, double tau,
                    int64_t stride, at::Tensor& decision, const LayerTau* layer_tau) {
  check_decide(q, previous, step, decision);
  check_layer_tau(q, layer_tau);
#ifdef ENGRAM_WITH_CUDA
  // The kernel reads f32, bf16 and f16 queries; any other dtype takes the reference.
  const at::ScalarType t = q.scalar_type();
  const bool kernel_dtype = t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
  if (q.is_cuda() && kernel_dtype && q.size(1) <= 256 && previous.is_contiguous() &&
      decision.is_contiguous()) {
    louiskv_decide_cuda(q.contiguous(), previous, step, tau, stride, decision, layer_tau);
    return;
  }
#endif
  louiskv_decide_reference(q, previous, step, tau, stride, decision, layer_tau);
}

}  // namespace engram::gpu
