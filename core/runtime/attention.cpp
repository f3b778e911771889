#include "core/runtime/attention.h"

#include <torch/version.h>

#include <cmath>
#include <limits>

#include "gpu/decode_attention.h"
#include "gpu/env_flag.h"
#include "gpu/softmax_column_max.h"
#include "gpu/stream_fork.h"

namespace engram {
namespace {

// Scores of q against k without repeating KV heads: the g query heads of a KV head become rows.
// q [B, Hq, S, d], k [B, Hkv, T, d] -> [B, Hkv, g·S, T] (in f32 when `f32`).
at::Tensor grouped_scores(const at::Tensor& q, const at::Tensor& k, bool f32) {
  const int64_t b = q.size(0), hq = q.size(1), s = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), g = hq / hkv;
  at::Tensor qg = q.reshape({b, hkv, g * s, d});
  at::Tensor kt = k.transpose(-1, -2);
  if (f32) return at::matmul(qg.to(at::kFloat), kt.to(at::kFloat));
  return at::matmul(qg, kt);
}

// mask [B, M, S, T] (M = 1 or Hkv) -> [B, M, g·S, T] matching grouped_scores' rows.
at::Tensor grouped_mask(const at::Tensor& mask, int64_t g) {
  const int64_t b = mask.size(0), m = mask.size(1), s = mask.size(2), t = mask.size(3);
  return mask.unsqueeze(2).expand({b, m, g, s, t}).reshape({b, m, g * s, t});
}

// The position mask, narrowed per KV head by key_valid when a ragged working set sets it:
// [B, 1, S, T], or [B, Hkv, S, T].
at::Tensor attend_mask(const AttendKv& kv, const at::Tensor& q_positions,
                       std::optional<int64_t> window) {
  if (kv.mask.defined()) return kv.mask;
  at::Tensor mask = position_mask(q_positions, kv.key_positions, window);
  if (kv.key_valid.defined()) mask = mask.logical_and(kv.key_valid.unsqueeze(2));
  return mask;
}

at::Tensor grouped_probabilities(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask,
                                 bool f32_scores) {
  const int64_t g = q.size(1) / k.size(1);
  at::Tensor scores = grouped_scores(q, k, f32_scores || q.scalar_type() == at::kFloat) *
                      (1.0 / std::sqrt(double(q.size(3))));
  if (mask.defined()) {
    scores.masked_fill_(grouped_mask(mask, g).logical_not(),
                        -std::numeric_limits<float>::infinity());
  }
  return at::softmax(scores, -1, at::kFloat);  // [B, Hkv, g·S, T] f32
}

// The grouped path: used for decode (S small) and as the reference path on torch 1.13.
at::Tensor grouped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& mask) {
  const int64_t b = q.size(0), hq = q.size(1), s = q.size(2), d = q.size(3);
  const int64_t g = hq / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor scores = grouped_scores(q, k, q.scalar_type() == at::kFloat) * scale;
  if (mask.defined()) {
    scores.masked_fill_(grouped_mask(mask, g).logical_not(),
                        -std::numeric_limits<float>::infinity());
  }
  // Softmax in f32 as transformers' eager attention does, then back to the compute dtype.
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(v.scalar_type());
  at::Tensor out = at::matmul(probs, v);  // [B, Hkv, g·S, d]
  return out.reshape({b, hq, s, d});
}

#if TORCH_VERSION_MAJOR >= 2
// ENGRAM_MASKED_RAGGED=1: ragged prefill blocks take the masked path (the peer of the
// variable-length one, measured by the same build).
bool ragged_flash_off() {
  static const bool off = gpu::env_flag("ENGRAM_MASKED_RAGGED");
  return off;
}

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& mask_in, bool causal) {
  const int64_t g = q.size(1) / k.size(1);
  // A per-KV-head mask (key_valid) covers each KV head's g query heads.
  const at::Tensor mask =
      mask_in.defined() && mask_in.size(1) > 1 && g > 1 ? mask_in.repeat_interleave(g, 1) : mask_in;
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
  // With a mask, only the math backend takes enable_gqa (flash takes no mask, the memory-
  // efficient kernel no GQA, cuDNN is off: decoder.cpp), and math materialises f32 scores of
  // every head: a 512-token block over a 20K prefix prefilled an 8B shape at ~3K tokens/s.
  // Repeating the KV heads (as transformers' SDPA path does) lets the memory-efficient kernel
  // take it; the copy is one layer's KV, transient.
  if (mask.defined() && g > 1 && q.is_cuda()) {
    return at::scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                            mask, 0.0, causal);
  }
  return at::scaled_dot_product_attention(
      q, k, v, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt, 0.0, causal,
      c10::nullopt, /*enable_gqa=*/g > 1);
#else
  at::Tensor ke = k.repeat_interleave(g, 1);
  at::Tensor ve = v.repeat_interleave(g, 1);
  return at::scaled_dot_product_attention(
      q, ke, ve, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt, 0.0, causal);
#endif
}

// A prefill block over a ragged working set whose hidden slots lead each KV head's list
// (AttendKv::key_valid_suffix): FlashAttention's variable-length kernel with one sequence per
// (row, KV head), its g query heads over the block's S queries and its keys the head's valid
// slots read in place (cu_seqlens_k: the first valid row, seqused_k: how many), the block's
// causal alignment bottom-right as in the dense case. The masked path repeated the KV heads and
// read a [B, Hq, S, T] mask in every layer of every block. Undefined when the keys' layout does
// not allow it (the caller masks instead).
at::Tensor suffix_flash_attention(const at::Tensor& q, const AttendKv& kv) {
  const int64_t b = q.size(0), hq = q.size(1), s = q.size(2), d = q.size(3);
  const int64_t hkv = kv.keys.size(1), g = hq / hkv, t = kv.keys.size(2);
  const auto rows_of = [&](const at::Tensor& x) -> int64_t {
    if (x.stride(3) != 1 || x.stride(2) != d || x.stride(1) % d != 0) return 0;
    if (b > 1 && x.stride(0) != hkv * x.stride(1)) return 0;
    return x.stride(1) / d;  // rows from one head's first slot to the next head's
  };
  const int64_t rows = rows_of(kv.keys);
  if (rows == 0 || rows_of(kv.values) != rows || rows < t) return {};
  const auto ints = at::TensorOptions().dtype(at::kInt).device(q.device());
  const at::Tensor used =
      kv.key_valid.sum(at::IntArrayRef{2}, false, at::kInt).reshape({-1}).contiguous();  // [B·Hkv]
  const at::Tensor first = at::arange(b * hkv, ints) * rows + (t - used);
  const at::Tensor cu_k = at::cat({first, at::full({1}, b * hkv * rows, ints)});
  const at::Tensor cu_q = at::arange(0, (b * hkv + 1) * s, s, ints);
  const auto flat = [&](const at::Tensor& x) {
    return x.as_strided({b * hkv * rows, 1, d}, {d, d, 1}, x.storage_offset());
  };
  const at::Tensor qs =
      q.reshape({b, hkv, g, s, d}).permute({0, 1, 3, 2, 4}).reshape({b * hkv * s, g, d});
  const at::Tensor out = std::get<0>(at::_flash_attention_forward(
      qs, flat(kv.keys), flat(kv.values), cu_q, cu_k, s, t, 0.0, /*is_causal=*/true,
      /*return_debug_mask=*/false, /*scale=*/c10::nullopt, /*window_size_left=*/c10::nullopt,
      /*window_size_right=*/c10::nullopt, /*seqused_k=*/used));
  return out.view({b, hkv, s, g, d}).permute({0, 1, 3, 2, 4}).reshape({b, hq, s, d});
}
#endif

}  // namespace

at::Tensor position_mask(const at::Tensor& q_positions, const at::Tensor& key_positions,
                         std::optional<int64_t> window) {
  at::Tensor q = q_positions.unsqueeze(2);    // [B, S, 1]
  at::Tensor k = key_positions.unsqueeze(1);  // [B, 1, T]
  at::Tensor mask = k.ge(0).logical_and(k.le(q));
  if (window) mask = mask.logical_and(k.gt(q - *window));
  return mask.unsqueeze(1);  // [B, 1, S, T]
}

at::Tensor attention(const at::Tensor& q, const AttendKv& kv, const at::Tensor& q_positions,
                     std::optional<int64_t> window) {
  const int64_t s = q.size(2), t = kv.keys.size(2);
  const bool window_cuts = window && t > *window;
  const bool dense = kv.dense_causal && !window_cuts && !kv.key_valid.defined();
  if (s == 1 && q.is_cuda()) {
    // Decode: the split-slot kernel (gpu/decode_attention.h); a new token of a dense cache sees
    // every key, so its positions are not read.
    const int64_t b = q.size(0);
    const at::Tensor last_slots = at::full({b}, t - 1, q_positions.options());
    return gpu::decode_attention(q.squeeze(2), kv.keys, kv.values,
                                 dense ? at::Tensor() : kv.key_positions, kv.key_valid,
                                 q_positions.reshape({b}), last_slots, window.value_or(0),
                                 1.0 / std::sqrt(static_cast<double>(q.size(3))))
        .unsqueeze(2);
  }
  if (dense && s == 1) {
    return grouped_attention(q, kv.keys, kv.values, at::Tensor());  // a new token sees all keys
  }
#if TORCH_VERSION_MAJOR >= 2
  if (s > 1) {
    if (dense && s == t) return sdpa(q, kv.keys, kv.values, at::Tensor(), /*causal=*/true);
    if (dense && q.is_cuda() &&
        (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf)) {
      // A block after its prefix: the queries are the last s of t keys, which is FlashAttention's
      // own (bottom-right) causal alignment (torch's causal_lower_right dispatches the same way);
      // its kernel takes the KV heads unrepeated. The masked path repeated them and read a
      // [s, t] mask: 3.7x slower than transformers' re-prefill of a 90K-token history.
      return std::get<0>(at::_scaled_dot_product_flash_attention(q, kv.keys, kv.values, 0.0,
                                                                 /*is_causal=*/true));
    }
    if (kv.dense_causal && kv.key_valid_suffix && kv.key_valid.defined() && !window_cuts &&
        q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) &&
        !ragged_flash_off()) {
      const at::Tensor out = suffix_flash_attention(q, kv);
      if (out.defined()) return out;
    }
    return sdpa(q, kv.keys, kv.values, attend_mask(kv, q_positions, window), /*causal=*/false);
  }
#endif
  return grouped_attention(q, kv.keys, kv.values, attend_mask(kv, q_positions, window));
}

at::Tensor attention_scores(const at::Tensor& q_rows, const at::Tensor& keys) {
  const int64_t b = q_rows.size(0), hq = q_rows.size(1), r = q_rows.size(2);
  return grouped_scores(q_rows, keys, /*f32=*/false).view({b, hq, r, keys.size(2)});
}

std::vector<QueryRun> query_runs(const std::vector<int64_t>& sorted_positions) {
  std::vector<QueryRun> runs;
  for (size_t i = 0; i < sorted_positions.size(); ++i) {
    if (runs.empty() || sorted_positions[i] != runs.back().end)
      runs.push_back({static_cast<int64_t>(i), 0, sorted_positions[i]});
    ++runs.back().count;
    ++runs.back().end;
  }
  return runs;
}

at::Tensor attention_by_runs(const at::Tensor& q, const AttendKv& kv, const at::Tensor& q_positions,
                             const std::vector<QueryRun>& runs, std::optional<int64_t> window,
                             const std::function<void()>& alongside) {
  // `alongside` (KEEP's probes, small) on a high-priority side stream: its kernels take SMs as
  // the runs' blocks retire, so the evidence the host waits for is not queued behind them.
  std::optional<gpu::StreamFork> beside;
  if (alongside) {
    beside.emplace(q.device(), /*high_priority=*/true);
    beside->run(alongside);
  }
  std::vector<at::Tensor> parts;
  for (const QueryRun& run : runs) {
    const AttendKv part{kv.keys.narrow(2, 0, run.end), kv.values.narrow(2, 0, run.end),
                        kv.key_positions.narrow(1, 0, run.end), /*dense_causal=*/true};
    parts.push_back(attention(q.narrow(2, run.first, run.count), part,
                              q_positions.narrow(1, run.first, run.count), window));
  }
  if (beside) beside->join();
  return parts.size() == 1 ? parts.front() : at::cat(parts, 2);
}

at::Tensor attention_probabilities(const at::Tensor& q_rows, const AttendKv& kv,
                                   const at::Tensor& q_row_positions, std::optional<int64_t> window,
                                   bool f32_scores) {
  const int64_t b = q_rows.size(0), hq = q_rows.size(1), r = q_rows.size(2);
  at::Tensor probs =
      grouped_probabilities(q_rows, kv.keys, attend_mask(kv, q_row_positions, window), f32_scores);
  return probs.reshape({b, hq, r, kv.keys.size(2)});
}

at::Tensor cached_attention_max(const at::Tensor& q_rows, const AttendKv& kv,
                                const at::Tensor& q_row_positions, std::optional<int64_t> window,
                                int64_t cached, bool causal) {
  const int64_t b = q_rows.size(0), hq = q_rows.size(1), r = q_rows.size(2), d = q_rows.size(3);
  const int64_t hkv = kv.keys.size(1), g = hq / hkv;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor scores;  // [B, Hkv, g·R, cached] f32
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  if (q_rows.is_cuda() && q_rows.scalar_type() != at::kFloat &&
      q_rows.scalar_type() == kv.keys.scalar_type()) {
    // The 16-bit operands on tensor cores with f32 accumulation and output: the products are
    // exact as in the f32 path below, the sums f32, so the scores are its own up to summation
    // order and the scale's rounding. The f32 path ran as an FFMA GEMM (~5 ms of a ~100 ms
    // preparation step on the 3B shape) after converting every cached key.
    const at::Tensor qg = q_rows.reshape({b * hkv, g * r, d});
    const at::Tensor kt =
        kv.keys.narrow(2, 0, cached).reshape({b * hkv, cached, d}).transpose(1, 2);
    scores = at::bmm(qg, kt, at::kFloat).mul_(scale).view({b, hkv, g * r, cached});
  }
#endif
  if (!scores.defined()) {
    // f32 operands: products of 16-bit values are exact in f32, so the scores are the f32 path's
    // up to summation order.
    const at::Tensor qg = q_rows.reshape({b, hkv, g * r, d}).to(at::kFloat) * scale;
    const at::Tensor k = kv.keys.narrow(2, 0, cached).to(at::kFloat);
    scores = at::matmul(qg, k.transpose(-1, -2));
  }
  // Cached keys precede the rows unless `causal`; else only a window, a ragged set or an explicit
  // mask hides some.
  if (causal || window || kv.key_valid.defined() || kv.mask.defined()) {
    const at::Tensor mask = attend_mask(kv, q_row_positions, window).narrow(3, 0, cached);
    scores.masked_fill_(grouped_mask(mask, g).logical_not(), neg_inf);
  }
  return gpu::softmax_column_max(scores);  // [B, Hkv, cached]
}

AttentionWithProbabilities attention_with_probabilities(const at::Tensor& q, const AttendKv& kv,
                                                        const at::Tensor& q_positions,
                                                        std::optional<int64_t> window) {
  const int64_t b = q.size(0), hq = q.size(1), s = q.size(2), d = q.size(3);
  const int64_t hkv = kv.keys.size(1), g = hq / hkv, t = kv.keys.size(2);
  at::Tensor scores = grouped_scores(q, kv.keys, q.scalar_type() == at::kFloat) *
                      (1.0 / std::sqrt(static_cast<double>(d)));
  scores.masked_fill_(grouped_mask(attend_mask(kv, q_positions, window), g).logical_not(),
                      -std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(scores, -1, at::kFloat);  // [B, Hkv, g·S, T]
  AttentionWithProbabilities r;
  r.out = at::matmul(probs.to(kv.values.scalar_type()), kv.values).reshape({b, hq, s, d});
  r.mean_probs = probs.view({b, hq, s, t}).mean(1);
  return r;
}

}  // namespace engram
