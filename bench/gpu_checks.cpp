// engram-gpu-checks: every CUDA path against its CPU reference on the device, plus the pinned
// host KV source against the resident cache (same logits, copy intervals on the copy lane).
// Writes one JSON object; exits non-zero when a comparison exceeds its tolerance.
//   engram-gpu-checks [--json FILE] [--shape qwen2.5-7b] [--prefix 4096] [--tokens 256]
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/engine/episode_kv_pool.h"
#include "core/engine/generation_state.h"
#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/kv_unit_pool.h"
#include "core/kv/pinned_kv_source.h"
#include "core/kv/retrieval_kv_source.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/louiskv_policy.h"
#include "core/policies/page_retrieval_policy.h"
#include "core/policies/policy_registry.h"
#include "core/runtime/attention.h"
#include "core/runtime/static_decode_step.h"
#include "core/trace/trace_recorder.h"
#include "gpu/argmax_rows.h"
#include "gpu/budgeted_select.h"
#include "gpu/cuda_graph.h"
#include "gpu/decode_attention.h"
#include "gpu/decode_linear.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/exact_pinned.h"
#include "gpu/key_kmeans.h"
#include "gpu/louiskv_scoring.h"
#include "gpu/page_gather.h"
#include "gpu/rms_norm.h"
#include "gpu/rms_norm_exact.h"
#include "gpu/rope_angles.h"
#include "gpu/rope_apply.h"
#include "gpu/rope_kv_write.h"
#include "gpu/rope_rotate.h"
#include "gpu/row_gather.h"
#include "gpu/silu_mul.h"
#include "gpu/softmax_column_max.h"
#include "gpu/unit_attention_mass.h"

using namespace engram;

namespace {

struct Collect : EngineObserver {
  std::vector<LayerInterval> intervals;
  void on_layer_interval(const LayerInterval& i) override { intervals.push_back(i); }
};

nlohmann::json check_rope_rotate(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t d : {64, 128}) {
      for (int64_t t : {1, 17, 1000}) {
        at::manual_seed(t * d);
        at::Tensor keys = at::randn({4, t, d}).to(dtype);
        at::Tensor deltas = at::randint(-5000, 5000, {t}, at::kLong);
        at::Tensor inv = 1.0 / at::pow(10000.0, at::arange(0, d, 2).to(at::kFloat) / d);
        at::Tensor ref = keys.clone();
        gpu::rope_rotate_reference_(ref, deltas, inv);
        at::Tensor dev = keys.cuda();
        gpu::rope_rotate_(dev, deltas.cuda(), inv.cuda());
        const double err =
            (dev.cpu().to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<double>();
        const double tol = dtype == at::kFloat ? 1e-4 : 2e-2;
        ok = ok && err <= tol;
        out.push_back({{"dtype", c10::toString(dtype)},
                       {"head_dim", d},
                       {"tokens", t},
                       {"max_abs_error", err},
                       {"tolerance", tol}});
      }
    }
  }
  return out;
}

// Attention per run of contiguous rows (one variable-length FlashAttention call for all runs
// on CUDA bf16/f16) against the masked call over the same rows.
nlohmann::json check_attention_runs(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    for (int64_t t : {300, 4135}) {
      at::manual_seed(t);
      const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
      const int64_t hq = 40, hkv = 8, d = 128;
      // rows: a few runs spread over the keys, the last one ending at t (the query)
      std::vector<int64_t> rows;
      for (int64_t begin : {t / 10, t / 3, t / 2, t - t / 5})
        for (int64_t i = 0; i < 17 + begin % 23; ++i)
          rows.push_back(begin + i);
      for (int64_t i = t - 32; i < t; ++i)
        rows.push_back(i);
      const auto r = static_cast<int64_t>(rows.size());
      const at::Tensor q = at::randn({1, hq, r, d}, opts);
      const at::Tensor k = at::randn({1, hkv, t, d}, opts), v = at::randn({1, hkv, t, d}, opts);
      const at::Tensor all =
          at::arange(t, at::TensorOptions().dtype(at::kLong).device(at::kCUDA)).view({1, t});
      const at::Tensor row_positions = at::tensor(rows, at::kLong).to(at::kCUDA).view({1, r});
      const AttendKv kv{k, v, all, /*dense_causal=*/true};
      AttendKv masked = kv;
      masked.dense_causal = false;
      masked.mask = position_mask(row_positions, all, std::nullopt);
      const at::Tensor by_runs =
          attention_by_runs(q, kv, row_positions, query_runs(rows), std::nullopt);
      const at::Tensor reference = attention(q, masked, row_positions, std::nullopt);
      const double err =
          (by_runs.to(at::kFloat) - reference.to(at::kFloat)).abs().max().item<double>();
      const double tol = 2e-2;
      ok = ok && err <= tol;
      out.push_back({{"dtype", c10::toString(dtype)},
                     {"keys", t},
                     {"rows", r},
                     {"runs", query_runs(rows).size()},
                     {"max_abs_error", err},
                     {"tolerance", tol}});
    }
  }
  return out;
}

// Mean microseconds of `runs` calls of fn(i) launched back to back, after `warmup` calls, the
// device synchronized before and after.
double mean_device_us(at::Device device, int warmup, int runs, const std::function<void(int)>& fn) {
  for (int i = 0; i < warmup; ++i)
    fn(i);
  gpu::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i)
    fn(i);
  gpu::synchronize(device);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
         runs;
}

// A prefill block over a ragged working set whose hidden slots lead each KV head's list
// (AttendKv::key_valid_suffix: one variable-length FlashAttention call reading the keys in
// place) against the masked call and against f32 attention on the CPU over each head's valid
// keys. The keys sit in a buffer with more slots than attended (a cache's capacity); one head
// sees only the block, one every slot. Times both calls (the 8B shape's block of 512 over ~8.7K
// slots is the per_head=2 prefill's).
nlohmann::json check_ragged_prefill(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    for (const auto& [s, t] : std::vector<std::pair<int64_t, int64_t>>{{64, 700}, {512, 8704}}) {
      at::manual_seed(t + s);
      const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
      const int64_t hq = 32, hkv = 8, d = 128, capacity = t + 300;
      const at::Tensor q = at::randn({1, s, hq, d}, opts).transpose(1, 2);  // as the decoder's
      const at::Tensor kbuf = at::randn({1, hkv, capacity, d}, opts);
      const at::Tensor vbuf = at::randn({1, hkv, capacity, d}, opts);
      const std::vector<int64_t> hidden = {0, 37, t - s, 1, 500, (t - s) / 2, 255, t - s - 1};
      at::Tensor valid = at::ones({1, hkv, t}, at::kBool);
      for (int64_t h = 0; h < hkv; ++h)
        valid[0][h].narrow(0, 0, hidden[static_cast<size_t>(h)]).fill_(false);
      AttendKv kv{
          kbuf.narrow(2, 0, t), vbuf.narrow(2, 0, t),
          at::arange(t, at::TensorOptions().dtype(at::kLong).device(at::kCUDA)).view({1, t}),
          /*dense_causal=*/true};
      kv.key_valid = valid.to(at::kCUDA);
      kv.key_valid_suffix = true;
      AttendKv masked = kv;
      masked.key_valid_suffix = false;
      const at::Tensor positions = kv.key_positions.narrow(1, t - s, s);
      const at::Tensor got = attention(q, kv, positions, std::nullopt);
      const at::Tensor by_mask = attention(q, masked, positions, std::nullopt);
      AttendKv host{kv.keys.cpu().to(at::kFloat), kv.values.cpu().to(at::kFloat),
                    kv.key_positions.cpu(), /*dense_causal=*/true};
      host.key_valid = valid;
      const at::Tensor reference =
          attention(q.cpu().to(at::kFloat), host, positions.cpu(), std::nullopt);
      const double err = (got.cpu().to(at::kFloat) - reference).abs().max().item<double>();
      const double mask_err = (by_mask.cpu().to(at::kFloat) - reference).abs().max().item<double>();
      const double tol = 2e-2;
      ok = ok && err <= tol && got.sizes() == by_mask.sizes();
      const at::Device dev(at::kCUDA, 0);
      const double us = mean_device_us(dev, 3, 20, [&](int) { attention(q, kv, positions, {}); });
      const double mask_us =
          mean_device_us(dev, 3, 20, [&](int) { attention(q, masked, positions, {}); });
      out.push_back({{"dtype", c10::toString(dtype)},
                     {"block", s},
                     {"slots", t},
                     {"max_abs_error", err},
                     {"masked_max_abs_error", mask_err},
                     {"tolerance", tol},
                     {"us", us},
                     {"masked_us", mask_us}});
      std::fprintf(stderr,
                   "%s ragged prefill %s block %lld over %lld slots: err %.2e (masked %.2e), %.1f "
                   "us (masked %.1f)\n",
                   err <= tol ? "PASS" : "FAIL", c10::toString(dtype), static_cast<long long>(s),
                   static_cast<long long>(t), err, mask_err, us, mask_us);
    }
  }
  return out;
}

// How many elements of a and b differ (compared in f32).
int64_t elements_differing(const at::Tensor& a, const at::Tensor& b) {
  return a.to(at::kFloat).ne(b.to(at::kFloat)).sum().item<int64_t>();
}

// The prefill's fused RoPE and SiLU·up against the torch expressions they replace, both on
// CUDA: they reproduce the expressions' rounding points, so the difference must be exactly 0
// (the plain prefill stays bit-equal to transformers).
nlohmann::json check_prefill_elementwise(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
    for (int64_t batch : {1, 2}) {
      for (int64_t s : {1, 37, 1024}) {
        at::manual_seed(batch * 1000 + s);
        // q and k as views of one projection's output, as project_qkv makes them.
        const int64_t hq = 8, hkv = 2, d = s == 1 ? 24 : s == 37 ? 64 : 128;  // 24: scalar kernel
        const at::Tensor qkv = (4 * at::randn({batch, s, (hq + 2 * hkv) * d})).to(opts);
        const at::Tensor q = qkv.narrow(-1, 0, hq * d).view({batch, s, hq, d}).transpose(1, 2);
        const at::Tensor k =
            qkv.narrow(-1, hq * d, hkv * d).view({batch, s, hkv, d}).transpose(1, 2);
        const at::Tensor positions =
            at::randint(0, 120000, {batch, s}, at::TensorOptions().dtype(at::kLong)).cuda();
        const at::Tensor inv =
            (1.0 / at::pow(500000.0, at::arange(0, d, 2).to(at::kFloat) / d)).cuda();
        const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv;
        const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
        const at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
        int64_t bad = elements_differing(gpu::rope_apply(q, cos, sin),
                                         gpu::rope_apply_reference(q, cos, sin)) +
                      elements_differing(gpu::rope_apply(k, cos, sin),
                                         gpu::rope_apply_reference(k, cos, sin));
        // cos/sin shared by every row of the batch
        const at::Tensor cos1 = cos.narrow(0, 0, 1), sin1 = sin.narrow(0, 0, 1);
        bad += elements_differing(gpu::rope_apply(q, cos1, sin1),
                                  gpu::rope_apply_reference(q, cos1, sin1));
        // the same layout as the expression's result (attention's arithmetic reads it)
        const at::Tensor fused = gpu::rope_apply(q, cos, sin);
        const at::Tensor expression = gpu::rope_apply_reference(q, cos, sin);
        if (s > 1) bad += fused.strides() != expression.strides();
        for (int64_t inter : {100, 13824}) {
          const at::Tensor gate_up = (3 * at::randn({batch, s, 2 * inter})).to(opts);
          bad += elements_differing(gpu::silu_mul(gate_up, inter),
                                    gpu::silu_mul_reference(gate_up, inter));
        }
        // The prefill's RMSNorm in torch's reduction order (three launches) against the ops.
        for (int64_t n : {128, 896, 3072, 4096}) {
          for (double scale : {1.0, 40.0}) {
            const at::Tensor x = (scale * at::randn({batch, s, n})).to(opts);
            const at::Tensor w = (1 + 0.1 * at::randn({n})).to(opts);
            for (double eps : {1e-5, 1e-6})
              bad += elements_differing(gpu::rms_norm_exact(x, w, eps),
                                        gpu::rms_norm_reference(x, w, eps));
          }
        }
        ok = ok && bad == 0;
        std::fprintf(stderr,
                     "%s prefill elementwise (rope, silu, rms norm) %s batch %lld tokens %lld: "
                     "%lld differ\n",
                     bad == 0 ? "PASS" : "FAIL", c10::toString(dtype),
                     static_cast<long long>(batch), static_cast<long long>(s),
                     static_cast<long long>(bad));
        out.push_back({{"dtype", c10::toString(dtype)},
                       {"batch", batch},
                       {"tokens", s},
                       {"elements_differing", bad}});
      }
    }
  }
  return out;
}

// The recorded step's RoPE angles and greedy argmax against the torch expressions they replace,
// both on CUDA: the angles are bit-equal (same f32 product, cosf / sinf, one rounding), the
// argmax picks the same index (ties to the first, a NaN first), on rows that are 16-byte aligned
// or not.
nlohmann::json check_rope_angles_and_argmax(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  const auto on_cuda = at::TensorOptions().device(at::kCUDA);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (double theta : {10000.0, 500000.0}) {
      const int64_t d = 128;
      const at::Tensor inv =
          (1.0 / at::pow(theta, at::arange(0, d, 2).to(at::kFloat) / d)).to(on_cuda);
      at::manual_seed(static_cast<int64_t>(theta));
      at::Tensor positions = at::randint(0, 131072, {3, 41}, at::kLong);
      positions[0][0] = 0;
      positions[0][1] = 131071;
      positions = positions.to(on_cuda);
      const auto [cos, sin] = gpu::rope_angles(positions, inv, dtype);
      const auto [cos_ref, sin_ref] = gpu::rope_angles_reference(positions, inv, dtype);
      const int64_t bad = elements_differing(cos, cos_ref) + elements_differing(sin, sin_ref) +
                          (cos.sizes() != cos_ref.sizes());
      ok = ok && bad == 0;
      std::fprintf(stderr, "%s rope angles %s theta %.0f: %lld elements differ\n",
                   bad == 0 ? "PASS" : "FAIL", c10::toString(dtype), theta,
                   static_cast<long long>(bad));
      out.push_back({{"kernel", "rope_angles"},
                     {"dtype", c10::toString(dtype)},
                     {"theta", theta},
                     {"elements_differing", bad}});
    }
  }
  for (int64_t rows : {1, 3, 8}) {
    for (int64_t vocab : {7, 32000, 128256, 151937}) {
      at::manual_seed(rows * vocab);
      // One column more than the vocabulary, read from column 1 when `offset`: rows that are not
      // 16-byte aligned.
      for (int64_t offset : {0, 1}) {
        at::Tensor storage = at::randn({rows, vocab + 1}, on_cuda.dtype(at::kFloat));
        at::Tensor logits = storage.narrow(1, offset, vocab);
        // Row 1: a tie at the maximum (the first must win); row 2: a NaN after the maximum; the
        // last row of eight: every value -inf (index 0).
        if (rows > 1) {
          const float top = logits[1].max().item<float>() + 1.f;
          logits[1][vocab - 1] = top;
          logits[1][vocab / 2] = top;
        }
        if (rows > 2) {
          logits[2][vocab / 3] = 1e30f;
          logits[2][vocab - 1] = std::numeric_limits<float>::quiet_NaN();
        }
        if (rows > 3) logits[rows - 1].fill_(-std::numeric_limits<float>::infinity());
        at::Tensor got = at::full({rows}, -1, on_cuda.dtype(at::kLong));
        gpu::argmax_rows(logits, got);
        const at::Tensor want = logits.argmax(1);
        const int64_t bad = got.ne(want).sum().item<int64_t>();
        ok = ok && bad == 0;
        std::fprintf(stderr, "%s argmax rows %lld vocab %lld offset %lld: %lld rows differ\n",
                     bad == 0 ? "PASS" : "FAIL", static_cast<long long>(rows),
                     static_cast<long long>(vocab), static_cast<long long>(offset),
                     static_cast<long long>(bad));
        out.push_back({{"kernel", "argmax_rows"},
                       {"rows", rows},
                       {"vocab", vocab},
                       {"offset", offset},
                       {"rows_differing", bad}});
      }
    }
  }
  return out;
}

// The fused kernels of the recorded decode step against their CPU references (the same grid as
// tests/test_static_decode.cpp, which cannot run where there is no GPU).
nlohmann::json check_fused_kernels(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
    for (int64_t n : {64, 128, 896, 3584, 5000}) {
      at::manual_seed(n);
      const at::Tensor x = at::randn({3, n}).to(dtype);
      const at::Tensor w = (1 + 0.1 * at::randn({n})).to(dtype);
      const at::Tensor ref = gpu::rms_norm_reference(x, w, 1e-6).to(at::kFloat);
      const at::Tensor got = gpu::rms_norm(x.cuda(), w.cuda(), 1e-6).cpu().to(at::kFloat);
      const double err = (got - ref).abs().max().item<double>();
      ok = ok && err <= tol;
      out.push_back({{"kernel", "rms_norm"},
                     {"dtype", c10::toString(dtype)},
                     {"hidden", n},
                     {"max_abs_error", err},
                     {"tolerance", tol}});
    }
    struct Heads {
      int64_t hq, hkv, d, capacity, slot;
    };
    for (const Heads& s :
         {Heads{28, 4, 128, 4352, 4100}, Heads{14, 2, 64, 17, 0}, Heads{8, 8, 32, 5, 4}}) {
      at::manual_seed(s.capacity);
      const at::Tensor qkv = at::randn({1, (s.hq + 2 * s.hkv) * s.d}).to(dtype);
      const at::Tensor angle = at::rand({s.d / 2}) * 3000;
      const at::Tensor cos = at::cat({angle.cos(), angle.cos()}).to(dtype);
      const at::Tensor sin = at::cat({angle.sin(), angle.sin()}).to(dtype);
      const at::Tensor slot = at::full({1}, s.slot, at::kLong);
      auto parts = [&](const at::Tensor& t) {
        return std::make_tuple(t.narrow(-1, 0, s.hq * s.d).view({s.hq, s.d}),
                               t.narrow(-1, s.hq * s.d, s.hkv * s.d).view({s.hkv, s.d}),
                               t.narrow(-1, (s.hq + s.hkv) * s.d, s.hkv * s.d).view({s.hkv, s.d}));
      };
      at::Tensor q_ref = at::empty({s.hq, s.d}, dtype);
      at::Tensor k_ref = at::zeros({s.hkv, s.capacity, s.d}, dtype);
      at::Tensor v_ref = at::zeros({s.hkv, s.capacity, s.d}, dtype);
      auto [q, k, v] = parts(qkv);
      gpu::rope_kv_write_reference(q, k, v, cos, sin, slot, q_ref, k_ref, v_ref);
      const at::Tensor qkv_d = qkv.cuda();
      auto [qd, kd, vd] = parts(qkv_d);
      at::Tensor q_got = at::empty({s.hq, s.d}, qkv_d.options());
      at::Tensor k_got = at::zeros({s.hkv, s.capacity, s.d}, qkv_d.options());
      at::Tensor v_got = at::zeros({s.hkv, s.capacity, s.d}, qkv_d.options());
      gpu::rope_kv_write(qd, kd, vd, cos.cuda(), sin.cuda(), slot.cuda(), q_got, k_got, v_got);
      double err = 0;
      for (auto [a, b] : {std::pair{q_got, q_ref}, {k_got, k_ref}, {v_got, v_ref}}) {
        err = std::max(err, (a.cpu().to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>());
      }
      ok = ok && err <= tol;
      out.push_back({{"kernel", "rope_kv_write"},
                     {"dtype", c10::toString(dtype)},
                     {"q_heads", s.hq},
                     {"kv_heads", s.hkv},
                     {"head_dim", s.d},
                     {"max_abs_error", err},
                     {"tolerance", tol}});
    }
  }
  return out;
}

nlohmann::json check_attention(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  struct Shape {
    int64_t hq, hkv, d, s, t;
    bool dense;
  };
  for (const Shape& sh : {Shape{28, 4, 128, 1, 4097, true}, Shape{28, 4, 128, 333, 333, true},
                          Shape{14, 2, 64, 7, 301, false}, Shape{32, 8, 128, 64, 1000, false}}) {
    at::manual_seed(sh.t);
    at::Tensor q = at::randn({1, sh.hq, sh.s, sh.d});
    AttendKv kv;
    kv.keys = at::randn({1, sh.hkv, sh.t, sh.d});
    kv.values = at::randn({1, sh.hkv, sh.t, sh.d});
    kv.key_positions = at::arange(sh.t, at::kLong).unsqueeze(0);
    kv.dense_causal = sh.dense;
    at::Tensor qpos = at::arange(sh.t - sh.s, sh.t, at::kLong).unsqueeze(0);
    const at::Tensor ref = attention(q, kv, qpos, std::nullopt);
    AttendKv dkv{kv.keys.cuda().to(at::kBFloat16), kv.values.cuda().to(at::kBFloat16),
                 kv.key_positions.cuda(), kv.dense_causal};
    const at::Tensor got =
        attention(q.cuda().to(at::kBFloat16), dkv, qpos.cuda(), std::nullopt).cpu().to(at::kFloat);
    const double err = (got - ref).abs().max().item<double>();
    ok = ok && err <= 5e-2;
    out.push_back({{"hq", sh.hq},
                   {"hkv", sh.hkv},
                   {"head_dim", sh.d},
                   {"queries", sh.s},
                   {"keys", sh.t},
                   {"dense", sh.dense},
                   {"max_abs_error_bf16_vs_f32", err}});
  }
  return out;
}

// The prefix of `prefix` tokens lives in pinned host memory; `tokens` new tokens run with the
// pinned source and with the prefix resident on the GPU.
nlohmann::json check_pinned_source(const std::string& shape, int64_t prefix, int64_t tokens,
                                   bool& ok) {
  LoadedModel m = load_model({"", shape, 1}, choose_device("cuda", "bf16"), {});
  const Decoder& d = *m.decoder;
  const ModelConfig& c = d.config();
  const KvCacheShape ks{c.num_layers, c.num_kv_heads, c.head_dim};
  std::vector<int64_t> ids(prefix + tokens);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = 3 + (i * 7919) % 30000;
  const std::vector<int64_t> head(ids.begin(), ids.begin() + prefix);
  const std::vector<int64_t> rest(ids.begin() + prefix, ids.end());
  std::vector<int64_t> rest_pos(tokens);
  for (int64_t i = 0; i < tokens; ++i)
    rest_pos[i] = prefix + i;

  KvCache resident(ks, 1, prefix + tokens, d.dtype(), d.device());
  gpu::DeviceTimeline tl0(d.device());
  prefill(d, resident, head, 2048, tl0, nullptr);
  const HostKv host = offload_to_host(resident, prefix);
  ForwardRequest req;
  req.tokens = {rest};
  req.positions = {rest_pos};
  req.all_logits = true;

  double resident_ms = 0, pinned_ms = 0;
  at::Tensor a, b;
  Collect collect;
  for (int run = 0; run < 3; ++run) {
    resident.truncate(0, prefix);
    CacheKvSource rs(resident);
    gpu::DeviceTimeline tl(d.device());
    gpu::synchronize(d.device());
    auto t0 = std::chrono::steady_clock::now();
    a = d.forward(req, rs, tl, nullptr).logits;
    gpu::synchronize(d.device());
    resident_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    KvCache tail(ks, 1, tokens, d.dtype(), d.device());
    PinnedKvSource ps(host, tail, 1);
    gpu::DeviceTimeline tl2(d.device());
    collect.intervals.clear();
    TraceRecorder trace(tl2, &collect, run);
    gpu::synchronize(d.device());
    t0 = std::chrono::steady_clock::now();
    b = d.forward(req, ps, tl2, &trace).logits;
    gpu::synchronize(d.device());
    pinned_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    trace.flush();
  }
  const double err = (a - b).abs().max().item<double>();
  const double top1 = a.argmax(-1).eq(b.argmax(-1)).to(at::kFloat).mean().item<double>();
  double copy_us = 0, compute_us = 0, span_us = 0;
  for (const auto& i : collect.intervals) {
    (i.lane == TraceLane::kCopy ? copy_us : compute_us) += i.duration_us();
    span_us = std::max(span_us, i.end_us);
  }
  ok = ok && top1 >= 0.99;
  const double bytes = static_cast<double>(host.bytes_per_layer()) * c.num_layers;
  return {{"shape", shape},
          {"prefix_tokens", prefix},
          {"new_tokens", tokens},
          {"resident_ms", resident_ms},
          {"pinned_ms", pinned_ms},
          {"max_abs_logit_difference", err},
          {"top1_agreement", top1},
          {"copied_bytes", bytes},
          {"copy_lane_busy_us", copy_us},
          {"compute_lane_busy_us", compute_us},
          {"timeline_span_us", span_us},
          {"copy_gbps", bytes / (copy_us * 1e3)},
          {"overlap_note", "copies of layer i+1 are issued while layer i computes"}};
}

// Paged pool on the device: a bf16 unit moved device -> pinned -> disk -> device reads back
// bit for bit, and units loaded on the copy stream during a forward give the logits of the
// resident cache they were cut from (the llama-gqa fixture in f32; run from the repository root).
nlohmann::json check_page_pool(bool& ok) {
  nlohmann::json out;
  {
    const KvCacheShape ks{4, 4, 128};
    KvPagePoolOptions o;
    o.page_tokens = 64;
    o.device_pages = 8;
    o.pinned_pages = 8;
    o.spill_dir = "/tmp/engram-gpu-checks-spill";
    KvPagePool pages(ks, at::kBFloat16, at::Device(at::kCUDA, 0), o);
    KvUnitPool units(pages);
    const at::Tensor kv = at::randn({4, 2, 4, 150, 128}).to(at::kBFloat16);
    const int64_t id = units.add("turn", 0, kv, std::vector<int64_t>(150, 0), PageTier::kDevice);
    bool same = true;
    for (PageTier t : {PageTier::kPinned, PageTier::kDisk, PageTier::kDevice}) {
      units.move(id, t);
      same = same && at::equal(units.read(id), kv);
    }
    ok = ok && same;
    out["round_trip_bit_identical"] = same;
  }
  {
    // The page gather kernel against its reference body, reading a pinned and a device slab.
    const at::Device cuda(at::kCUDA, 0);
    const int64_t n = 6, layers = 3, heads = 4, page = 64, dim = 128, capacity = 400;
    at::Tensor host = gpu::empty_pinned({n, layers, 2, heads, page, dim}, at::kBFloat16);
    host.copy_(at::randn({n, layers, 2, heads, page, dim}).to(at::kBFloat16));
    const at::Tensor table = at::tensor({5, 1, 3, 0, 40, 104, 40, 64, 17}, at::kLong).view({3, 3});
    const at::Tensor table_dev = table.to(cuda);
    bool same = true;
    for (const at::Tensor& slab : {host, host.to(cuda)}) {
      const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
      at::Tensor k = at::zeros({heads, capacity, dim}, opts), v = at::zeros_like(k);
      at::Tensor k_ref = at::zeros_like(k), v_ref = at::zeros_like(k);
      gpu::gather_pages(k, v, slab, 2, table_dev[0], table_dev[1], table_dev[2]);
      gpu::gather_pages_reference(k_ref, v_ref, slab, 2, table[0], table[1], table[2]);
      same = same && at::equal(k, k_ref) && at::equal(v, v_ref);
    }
    ok = ok && same;
    out["gather_kernel_equals_reference_pinned_and_device"] = same;
    // Its inverse (an episode's write-back): the kernel writes a pinned and a device slab as the
    // reference does, and only each page's rows.
    bool scatter_same = true;
    const at::Tensor k = at::randn({heads, capacity, dim}).to(at::kBFloat16).to(cuda);
    const at::Tensor v = at::randn({heads, capacity, dim}).to(at::kBFloat16).to(cuda);
    // Also from a row inside each page (LouisKV's pool appends to a partly filled page).
    const at::Tensor first = at::tensor({10, 0, 30}, at::kLong);
    for (bool pinned : {true, false}) {
      for (bool inside : {false, true}) {
        at::Tensor slab = gpu::empty_pinned({n, layers, 2, heads, page, dim}, at::kBFloat16);
        slab.fill_(-3.0);
        if (!pinned) slab = slab.to(cuda);
        at::Tensor expected = slab.cpu().clone();
        gpu::scatter_pages(slab, 1, k, v, table_dev[0], table_dev[1], table_dev[2],
                           inside ? first.to(cuda) : at::Tensor());
        gpu::scatter_pages_reference(expected, 1, k.cpu(), v.cpu(), table[0], table[1], table[2],
                                     inside ? first : at::Tensor());
        gpu::synchronize(cuda);
        scatter_same = scatter_same && at::equal(slab.cpu(), expected);
      }
    }
    ok = ok && scatter_same;
    out["scatter_kernel_equals_reference_pinned_and_device"] = scatter_same;
  }
  {
    // EpiCache's waiting episodes (core/engine/episode_kv_pool.h) on the GPU: a bf16 working set
    // written back through the scatter kernel into pinned pages, spilled to disk, and loaded again
    // by the gather kernel is bit for bit what it was.
    const at::Device cuda(at::kCUDA, 0);
    const KvCacheShape es{4, 4, 128};
    KvWorkingSet ws(es, 512, at::kBFloat16, cuda, 4096), back(es, 512, at::kBFloat16, cuda, 4096);
    for (int64_t l = 0; l < es.layers; ++l) {
      const at::Tensor kv =
          at::randn({1, es.kv_heads, 300, es.head_dim}).to(at::kBFloat16).to(cuda);
      ws.cache().write(l, kv, kv * 2, at::arange(300, at::TensorOptions().dtype(at::kLong)));
    }
    std::vector<int64_t> pos(300);
    for (int64_t i = 0; i < 300; ++i)
      pos[i] = i;
    ws.cache().commit(300, {pos});
    ws.appended(300);
    EpisodeKvPoolOptions eo;
    eo.pinned_episodes = 1;
    eo.max_units_per_episode = 1;
    eo.spill_dir = "/tmp/engram-gpu-checks-spill";
    EpisodeKvPool episodes(es, at::kBFloat16, cuda, 512, eo);
    episodes.write_back(0, ws);
    episodes.write_back(1, ws);
    episodes.write_back(2, ws);  // room for one working set: earlier ones spill to disk
    bool same = episodes.spilled_tokens() > 0 && episodes.load(0, back);
    for (int64_t l = 0; same && l < es.layers; ++l) {
      same = at::equal(back.cache().keys(l), ws.cache().keys(l)) &&
             at::equal(back.cache().values(l), ws.cache().values(l));
    }
    ok = ok && same;
    out["episode_pool_round_trip_bit_identical"] = same;
  }
  LoadedModel m =
      load_model({"tests/data/models/llama-gqa", "", 0}, choose_device("cuda", "f32"), {});
  const Decoder& d = *m.decoder;
  const ModelConfig& c = d.config();
  const KvCacheShape ks{c.num_layers, c.num_kv_heads, c.head_dim};
  const int64_t p = 300, s = 8;
  std::vector<int64_t> ids(p + s), pos(p + s);
  for (int64_t i = 0; i < p + s; ++i) {
    ids[i] = 3 + (i * 7919) % (c.vocab_size - 3);
    pos[i] = i;
  }
  auto forward = [&](KvSource& src, int64_t from, int64_t n) {
    gpu::DeviceTimeline tl(d.device());
    ForwardRequest req;
    req.tokens = {std::vector<int64_t>(ids.begin() + from, ids.begin() + from + n)};
    req.positions = {std::vector<int64_t>(pos.begin() + from, pos.begin() + from + n)};
    req.all_logits = true;
    return d.forward(req, src, tl, nullptr).logits.cpu();
  };
  KvCache resident(ks, 1, p + s + 64, at::kFloat, d.device());
  CacheKvSource rs(resident);
  forward(rs, 0, p);
  KvPagePoolOptions o;
  o.page_tokens = 64;
  o.pinned_pages = 8;
  KvPagePool pages(ks, at::kFloat, d.device(), o);
  KvUnitPool units(pages);
  std::vector<int64_t> unit_ids;
  for (int64_t begin : {0, 100}) {
    const int64_t n = begin == 0 ? 100 : p - 100;
    std::vector<at::Tensor> layers;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      layers.push_back(at::stack(
          {resident.keys(l)[0].narrow(1, begin, n), resident.values(l)[0].narrow(1, begin, n)}));
    }
    unit_ids.push_back(units.add("turn", begin, at::stack(layers),
                                 std::vector<int64_t>(pos.begin() + begin, pos.begin() + begin + n),
                                 PageTier::kPinned));
  }
  const at::Tensor expected = forward(rs, p, s);
  KvCache working(ks, 1, 16, at::kFloat, d.device());
  UnitLoadingKvSource loading(units, unit_ids, working, 1);
  const at::Tensor got = forward(loading, p, s);
  const double err = (got - expected).abs().max().item<double>();
  ok = ok && err <= 1e-5;
  out["loaded_units_vs_resident_max_abs_logit_difference"] = err;
  out["loaded_tokens"] = loading.loaded_tokens();
  return out;
}

// LouisKV's kernels (issue 17) against their reference bodies: k-means assignment (near-ties,
// whose best two cosines are within 1e-5, may go either way and are not compared) and update,
// budgeted selection, the paged row gather from a pinned and a device slab; then one timing each at
// a LouisKV-sized layer.
nlohmann::json check_louiskv_kernels(bool& ok) {
  nlohmann::json out;
  const at::Device cuda(at::kCUDA, 0);
  auto line = [&](const std::string& what, bool pass, const std::string& detail) {
    std::fprintf(stderr, "%s louiskv %s: %s\n", pass ? "PASS" : "FAIL", what.c_str(),
                 detail.c_str());
    ok = ok && pass;
    return pass;
  };
  struct KmeansShape {
    int64_t heads, keys, clusters, dim;
  };
  nlohmann::json kmeans = nlohmann::json::array();
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const KmeansShape& s :
         {KmeansShape{2, 1000, 37, 128}, KmeansShape{8, 333, 64, 64},
          KmeansShape{1, 4097, 256, 128}, KmeansShape{3, 5, 1, 80}, KmeansShape{4, 200, 300, 96}}) {
      at::manual_seed(s.keys * s.clusters);
      const at::Tensor keys = (at::randn({s.heads, s.keys, s.dim}) + 0.3).to(dtype);
      const at::Tensor centroids = at::randn({s.heads, s.clusters, s.dim});
      const at::Tensor unit = centroids / centroids.norm(2, -1, true);
      const at::Tensor ref = gpu::kmeans_assign_reference(keys, unit);
      const at::Tensor got = gpu::kmeans_assign(keys.to(cuda), unit.to(cuda)).cpu();
      const at::Tensor cos =
          at::bmm(keys.to(at::kFloat) / keys.to(at::kFloat).norm(2, -1, true).clamp_min(1e-12),
                  unit.transpose(1, 2));
      at::Tensor decided = at::ones_like(ref, at::kBool);
      if (s.clusters > 1) {
        const at::Tensor top = std::get<0>(cos.topk(2, -1));
        decided = (top.select(-1, 0) - top.select(-1, 1)).gt(1e-5);
      }
      const int64_t wrong = got.ne(ref).logical_and(decided).sum().item<int64_t>();
      const int64_t skipped = decided.logical_not().sum().item<int64_t>();
      // Update from the reference assignment, so that both sides sum the same clusters (with
      // more clusters than keys some stay empty and keep their centroid).
      const at::Tensor ref_c = gpu::kmeans_update_reference(keys, ref, unit);
      const at::Tensor got_c = gpu::kmeans_update(keys.to(cuda), ref.to(cuda), unit.to(cuda)).cpu();
      const double err = (got_c - ref_c).abs().max().item<double>();
      const std::string shape = std::string(c10::toString(dtype)) + " " + std::to_string(s.heads) +
                                "x" + std::to_string(s.keys) + "x" + std::to_string(s.clusters) +
                                "x" + std::to_string(s.dim);
      line("kmeans_assign " + shape, wrong == 0,
           std::to_string(wrong) + " differ, " + std::to_string(skipped) + " near-ties skipped");
      line("kmeans_update " + shape, err <= 2e-5, "max abs error " + std::to_string(err));
      kmeans.push_back({{"dtype", c10::toString(dtype)},
                        {"heads", s.heads},
                        {"keys", s.keys},
                        {"clusters", s.clusters},
                        {"head_dim", s.dim},
                        {"assign_differing", wrong},
                        {"assign_near_ties_skipped", skipped},
                        {"update_max_abs_error", err},
                        {"update_tolerance", 2e-5}});
    }
  }
  out["kmeans"] = kmeans;

  nlohmann::json select = nlohmann::json::array();
  for (int64_t units : {1, 7, 64, 1000, 4096, 5000, 16384, 16385}) {
    at::manual_seed(units);
    // Few distinct scores (ties), zero sizes, and budgets from nothing to more than all units;
    // 5000 and 16384 units need more than 48 KiB of shared memory, 16385 take the reference.
    const at::Tensor scores = at::randint(0, 6, {4, units}).to(at::kFloat);
    const at::Tensor sizes = at::randint(0, 40, {4, units}, at::kLong);
    const at::Tensor offsets = at::randint(0, 1 << 20, {4, units}, at::kLong);
    const int64_t total = sizes.sum(1).max().item<int64_t>();
    for (int64_t budget : {int64_t{0}, int64_t{1}, int64_t{37}, total / 2, total + 100}) {
      const at::Tensor ref = gpu::budgeted_select_rows_reference(scores, sizes, offsets, budget);
      const at::Tensor got =
          gpu::budgeted_select_rows(scores.to(cuda), sizes.to(cuda), offsets.to(cuda), budget)
              .cpu();
      const bool same = got.sizes() == ref.sizes() && at::equal(got, ref);
      line("budgeted_select_rows units " + std::to_string(units) + " budget " +
               std::to_string(budget),
           same, same ? "equal" : "differs");
      select.push_back({{"units", units}, {"budget", budget}, {"equal", same}});
    }
  }
  out["budgeted_select_rows"] = select;

  nlohmann::json gather = nlohmann::json::array();
  struct GatherShape {
    at::ScalarType dtype;
    int64_t heads, pool, picked, dim;
  };
  for (const GatherShape& s :
       {GatherShape{at::kBFloat16, 8, 3000, 1024, 128}, GatherShape{at::kFloat, 4, 500, 77, 64},
        GatherShape{at::kHalf, 2, 100, 40, 96}, GatherShape{at::kFloat, 3, 50, 20, 3}}) {
    at::manual_seed(s.pool);
    // Layer 1 of a pinned slab of 64-row pages, its pages in a shuffled table: the kernel reads
    // from inside a pinned allocation through the table.
    const int64_t page = 64, pages = (s.pool + page - 1) / page;
    at::Tensor slab = gpu::empty_pinned({pages + 2, 2, 2, s.heads, page, s.dim}, s.dtype);
    slab.copy_(at::randn({pages + 2, 2, 2, s.heads, page, s.dim}).to(s.dtype));
    const at::Tensor table = at::randperm(pages + 2, at::kLong).narrow(0, 0, pages).contiguous();
    // Rows with -1 holes; destinations views of wider working sets (rows 5.. of picked + 9).
    at::Tensor rows = at::randint(0, s.pool, {s.heads, s.picked}, at::kLong);
    rows.masked_fill_(at::rand({s.heads, s.picked}).lt(0.1), -1);
    at::Tensor expected_k = at::full({s.heads, s.picked + 9, s.dim}, 3.f, s.dtype);
    at::Tensor expected_v = expected_k.clone();
    at::Tensor ek = expected_k.narrow(1, 5, s.picked + 2),
               ev = expected_v.narrow(1, 5, s.picked + 2);
    gpu::gather_paged_rows_reference(ek, ev, slab, 1, table, rows);
    for (const bool from_device : {false, true}) {
      const at::Tensor src = from_device ? slab.to(cuda) : slab;
      const auto opts = at::TensorOptions().dtype(s.dtype).device(cuda);
      at::Tensor kbuf = at::full({s.heads, s.picked + 9, s.dim}, 3.f, opts);
      at::Tensor vbuf = at::full({s.heads, s.picked + 9, s.dim}, 3.f, opts);
      at::Tensor k = kbuf.narrow(1, 5, s.picked + 2), v = vbuf.narrow(1, 5, s.picked + 2);
      gpu::gather_paged_rows(k, v, src, 1, table.to(cuda), rows.to(cuda));
      const bool same = at::equal(kbuf.cpu(), expected_k) && at::equal(vbuf.cpu(), expected_v);
      const std::string what = std::string(c10::toString(s.dtype)) + " " + std::to_string(s.heads) +
                               "x" + std::to_string(s.picked) + "x" + std::to_string(s.dim) +
                               (from_device ? " device" : " pinned");
      line("gather_paged_rows " + what, same, same ? "equal" : "differs");
      gather.push_back({{"dtype", c10::toString(s.dtype)},
                        {"heads", s.heads},
                        {"rows", s.picked},
                        {"head_dim", s.dim},
                        {"source", from_device ? "device" : "pinned"},
                        {"equal", same}});
    }
  }
  out["gather_paged_rows"] = gather;

  {
    // 32 layers' loads of 1024 rows x 8 heads x 128 bf16, keys and values, from a pinned pool of
    // 4096 rows in 64-row pages (each layer its own memory, so that no load is served from the L2
    // of the last).
    const int64_t layers = 32, heads = 8, pool = 4096, picked = 1024, dim = 128, page = 64;
    at::Tensor slab = gpu::empty_pinned({pool / page, layers, 2, heads, page, dim}, at::kBFloat16);
    slab.fill_(1);
    const at::Tensor table = at::randperm(pool / page, at::kLong).to(cuda);
    const at::Tensor rows = at::randperm(pool, at::kLong)
                                .narrow(0, 0, picked)
                                .unsqueeze(0)
                                .expand({heads, picked})
                                .contiguous()
                                .to(cuda);
    const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
    at::Tensor k = at::empty({heads, picked, dim}, opts), v = at::empty({heads, picked, dim}, opts);
    double best_ms = 1e30;
    for (int rep = 0; rep < 6; ++rep) {
      gpu::synchronize(cuda);
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t l = 0; l < layers; ++l)
        gpu::gather_paged_rows(k, v, slab, l, table, rows);
      gpu::synchronize(cuda);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) best_ms = std::min(best_ms, ms);  // the first warms up
    }
    const double bytes = static_cast<double>(2 * layers * heads * picked * dim * 2);
    const double gbps = bytes / (best_ms * 1e6);
    std::fprintf(stderr,
                 "TIME louiskv gather_paged_rows pinned: 32 layers x 1024 rows x 8 heads x 128 "
                 "bf16, K and V (%.1f MiB) in %.3f ms = %.1f GB/s\n",
                 bytes / (1 << 20), best_ms, gbps);
    out["gather_paged_rows_pinned_timing"] = {
        {"layers", layers}, {"rows", picked},     {"heads", heads}, {"head_dim", dim},
        {"bytes", bytes},   {"best_ms", best_ms}, {"gbps", gbps}};
  }
  {
    // One k-means iteration (assign + update) at 8 heads x 32768 keys x 2048 clusters x 128.
    const int64_t heads = 8, n = 32768, k = 2048, dim = 128;
    const auto opts = at::TensorOptions().device(cuda);
    const at::Tensor keys = at::randn({heads, n, dim}, opts).to(at::kBFloat16);
    at::Tensor centroids = at::randn({heads, k, dim}, opts);
    centroids = centroids / centroids.norm(2, -1, true);
    double assign_ms = 1e30, update_ms = 1e30;
    for (int rep = 0; rep < 4; ++rep) {
      gpu::synchronize(cuda);
      auto t0 = std::chrono::steady_clock::now();
      const at::Tensor assignment = gpu::kmeans_assign(keys, centroids);
      gpu::synchronize(cuda);
      auto t1 = std::chrono::steady_clock::now();
      const at::Tensor updated = gpu::kmeans_update(keys, assignment, centroids);
      gpu::synchronize(cuda);
      auto t2 = std::chrono::steady_clock::now();
      if (rep == 0) continue;  // warm-up
      assign_ms = std::min(assign_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
      update_ms = std::min(update_ms, std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    std::fprintf(stderr,
                 "TIME louiskv kmeans: 8 heads x 32768 bf16 keys x 2048 clusters x 128, one "
                 "iteration: assign %.3f ms + update %.3f ms = %.3f ms\n",
                 assign_ms, update_ms, assign_ms + update_ms);
    out["kmeans_iteration_timing"] = {
        {"heads", heads},         {"keys", n},
        {"clusters", k},          {"head_dim", dim},
        {"key_dtype", "bf16"},    {"assign_ms", assign_ms},
        {"update_ms", update_ms}, {"iteration_ms", assign_ms + update_ms}};
  }
  return out;
}
// LouisKV's decision kernel (gpu/louiskv_scoring.h) against its reference body on the device:
// r_t, the decision (adaptive and fixed stride, the first step) and the previous queries kept;
// with a layer's own τ (`rate=`), the τ each moves to.
nlohmann::json check_louiskv_decide(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(11);
  for (const int64_t stride : {0, 3, -1}) {  // -1: adaptive with the layer's own τ
    for (const int64_t step : {0, 1, 6, 7}) {
      const at::Tensor q = at::randn({32, 128}).to(at::kBFloat16);
      const at::Tensor prev = at::randn({32, 128}) + q.to(at::kFloat) * 2;
      at::Tensor prev_ref = prev.clone(), prev_gpu = prev.to(cuda);
      at::Tensor d_ref = at::zeros({2}), d_gpu = at::zeros({2}).to(cuda);
      const at::Tensor step_t = at::full({1}, step, at::kLong);
      // τ 0.9 either way; the own one moves by +0.005 / -0.015 (rate 25 %, gain 0.02).
      const gpu::LayerTau own_ref{at::full({1}, 0.9f), 0.005f, -0.015f};
      const gpu::LayerTau own_gpu{own_ref.threshold.to(cuda), 0.005f, -0.015f};
      const bool own = stride < 0;
      gpu::louiskv_decide_reference(q, prev_ref, step_t, 0.9, std::max<int64_t>(0, stride), d_ref,
                                    own ? &own_ref : nullptr);
      gpu::louiskv_decide(q.to(cuda), prev_gpu, step_t.to(cuda), 0.9, std::max<int64_t>(0, stride),
                          d_gpu, own ? &own_gpu : nullptr);
      const at::Tensor got = d_gpu.cpu();
      const bool pass = got[0].item<float>() == d_ref[0].item<float>() &&
                        std::abs(got[1].item<float>() - d_ref[1].item<float>()) < 1e-5f &&
                        prev_gpu.cpu().equal(prev_ref) &&
                        own_gpu.threshold.cpu().equal(own_ref.threshold);
      ok = ok && pass;
      std::fprintf(stderr,
                   "%s louiskv_decide stride=%lld step=%lld: r %.6f vs %.6f, retrieve %g, τ %.4f\n",
                   pass ? "PASS" : "FAIL", static_cast<long long>(stride),
                   static_cast<long long>(step), got[1].item<float>(), d_ref[1].item<float>(),
                   got[0].item<float>(), own_gpu.threshold.cpu().item<float>());
      out.push_back({{"kernel", "louiskv_decide"},
                     {"stride", stride},
                     {"step", step},
                     {"own_tau", own},
                     {"pass", pass}});
    }
  }
  return out;
}

// LouisKV's unit scores (two CUDA launches) against the torch reference on the device: a bf16 and
// an f32 index, a narrowed index (its head stride longer than its units), dead units, groups of
// 4 and 5 query heads; an `enabled` that says true changes nothing.
nlohmann::json check_louiskv_scores(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  const at::Device cuda(at::kCUDA, 0);
  at::manual_seed(12);
  struct Case {
    int64_t heads, group, units, capacity, d;
    at::ScalarType index_dtype;
  };
  for (const Case c :
       {Case{8, 4, 2048, 2048, 128, at::kBFloat16}, Case{8, 4, 1000, 1280, 128, at::kBFloat16},
        Case{8, 5, 333, 512, 128, at::kFloat}, Case{2, 4, 40, 64, 64, at::kBFloat16}}) {
    const at::Tensor q = at::randn({c.heads * c.group, c.d}).to(cuda).to(at::kBFloat16);
    const at::Tensor block =
        (at::randn({c.heads, c.capacity, c.d}) * 0.5).to(cuda).to(c.index_dtype);
    const at::Tensor index = block.narrow(1, 0, c.units);
    at::Tensor live = at::rand({c.capacity}).gt(0.2).to(cuda);
    live.select(0, 0).fill_(true);
    live = live.narrow(0, 0, c.units);
    const at::Tensor on = at::ones({1}, at::TensorOptions().dtype(at::kBool).device(cuda));
    const at::Tensor expect = gpu::louiskv_scores_reference(q, index, live);
    const at::Tensor got = gpu::louiskv_scores(q, index, live);
    const at::Tensor got_on = gpu::louiskv_scores(q, index, live, on);
    const double diff = (got - expect).abs().max().item<double>();
    const double scale = expect.abs().max().item<double>();
    const bool pass = diff <= 1e-5 * std::max(1.0, scale) + 1e-7 && got_on.equal(got) &&
                      got.sum(1).sub(1).abs().max().item<double>() < 1e-4;
    ok = ok && pass;
    std::fprintf(
        stderr, "%s louiskv_scores H=%lld g=%lld U=%lld (of %lld) d=%lld %s: max diff %.3g\n",
        pass ? "PASS" : "FAIL", static_cast<long long>(c.heads), static_cast<long long>(c.group),
        static_cast<long long>(c.units), static_cast<long long>(c.capacity),
        static_cast<long long>(c.d), c.index_dtype == at::kFloat ? "f32" : "bf16", diff);
    out.push_back({{"kernel", "louiskv_scores"},
                   {"units", c.units},
                   {"group", c.group},
                   {"max_diff", diff},
                   {"pass", pass}});
  }
  return out;
}

// Token ids first + (i * stride) % 30000 for i < n: a spread of a random-weight model's vocabulary.
std::vector<int64_t> spread_ids(int64_t n, int64_t first, int64_t stride) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] = first + (i * stride) % 30000;
  return ids;
}

// Decode-time retrieval in the recorded step (a CUDA graph; the policy decides on the device)
// against the per-layer path that decides on the host, on a random-weight model in f32: the same
// logits, decisions, offloads and rows loaded, for LouisKV adaptive (a τ at which some steps
// retrieve), LouisKV with a fixed stride and Quest, with a window that keeps offloading and a
// budget far below the pool. Ragged cases hide ~10-50 % of each (layer, KV head)'s prompt slots
// (an EpiCache per_head=2 set) and fill them with large keys and values: the per-layer path gives
// the same logits as without them (nothing reads a hidden slot) and, with a budget over the pool
// at every step, the plain ragged decode's.
nlohmann::json check_recorded_retrieval(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  LoadedModel m = load_model({"", "qwen2.5-0.5b", 4}, choose_device("cuda", "f32"), {});
  const Decoder& d = *m.decoder;
  const ModelConfig& c = d.config();
  const int64_t n = 900, steps = 96;
  const std::vector<int64_t> prompt = spread_ids(n, 3, 7919), fed = spread_ids(steps, 5, 104729);
  struct Case {
    std::string name;
    double tau;
    int64_t stride, page, window;
    bool ragged = false;
    int64_t budget = 128;
  };
  const std::vector<Case> cases{{"louiskv:tau=10", 0.1, 0, 0, 32},
                                {"louiskv:tau=50", 0.5, 0, 0, 32},
                                {"louiskv:stride=4", 0, 4, 0, 32},
                                {"louiskv:stride=4,window=256", 0, 4, 0, 256},
                                {"pageretrieval:page=8", 0, 0, 8, 32},
                                {"louiskv:tau=10 ragged", 0.1, 0, 0, 32, true},
                                {"pageretrieval:page=8 ragged", 0, 0, 8, 32, true},
                                {"louiskv:stride=1,budget=2048 ragged", 0, 1, 0, 32, true, 2048}};
  // Which prompt slots each (layer, KV head) sees in the ragged cases: head h hides ~10 + 10h %.
  at::manual_seed(21);
  const at::Tensor visible =
      at::rand({c.num_layers, c.num_kv_heads, n})
          .gt(at::linspace(0.1, 0.1 * double(c.num_kv_heads), c.num_kv_heads).view({1, -1, 1}));
  for (const Case& k : cases) {
    RetrievalSettings s;
    s.sinks = 16;
    s.window = k.window;
    s.budget = k.budget;
    s.full_layers = 1;
    const auto make = [&]() -> std::unique_ptr<RetrievalPolicy> {
      if (k.page > 0) return std::make_unique<PageRetrievalPolicy>(k.page, s);
      LouisKvOptions o;
      o.tau = k.tau;
      o.stride = k.stride;
      return std::make_unique<LouisKvPolicy>(o, s);
    };
    // `poison`: the hidden slots hold large keys and values; `plain`: no retrieval, attention
    // over the whole (ragged) cache.
    const auto run = [&](bool recorded, RetrievalStats& stats, bool poison = false,
                         bool plain = false) {
      const auto policy = make();
      KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, n + steps + 1, d.dtype(),
                    d.device());
      gpu::DeviceTimeline tl(d.device());
      prefill(d, cache, prompt, 512, tl, nullptr);
      if (k.ragged) {
        cache.set_key_valid(visible.to(d.device()));
        for (int64_t l = 0; poison && l < c.num_layers; ++l) {
          const at::Tensor hidden = cache.key_valid(l).logical_not().unsqueeze(-1);
          cache.keys(l).masked_fill_(hidden, 40.0);
          cache.values(l).masked_fill_(hidden, 1e3);
        }
      }
      RetrievalKvSource source(*policy, cache, steps, &cache);
      StaticDecodeStep step(d, cache);
      if (recorded) step.attach(&source);
      std::vector<at::Tensor> logits;
      for (int64_t i = 0; i < steps; ++i) {
        if (recorded) {
          logits.push_back(step.step(fed[i], n + i).cpu());
          continue;
        }
        ForwardRequest req;
        req.phase = ForwardPhase::kDecode;
        req.tokens = {{fed[i]}};
        req.positions = {{n + i}};
        CacheKvSource whole(cache);
        KvSource& from = plain ? static_cast<KvSource&>(whole) : source;
        logits.push_back(d.forward(req, from, tl, nullptr).logits.view({-1}).cpu());
      }
      step.attach(nullptr);
      stats = source.stats();
      return logits;
    };
    RetrievalStats a, a2, b, b2, unused;
    const auto want = run(false, a);
    const auto again = run(false, a2, k.ragged);  // ragged: the hidden slots poisoned
    const auto got = run(true, b, k.ragged);
    const auto got2 = run(true, b2, k.ragged);
    // Over the pool at every step: the plain decode of the ragged cache.
    const bool covering = k.ragged && k.budget >= n;
    const std::vector<at::Tensor> whole =
        covering ? run(false, unused, false, true) : std::vector<at::Tensor>();
    double err = 0, repeat = 0, plain_err = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < steps; ++i) {
      const double e = std::max((got[i] - want[i]).abs().max().item<double>(),
                                (got2[i] - want[i]).abs().max().item<double>());
      if (e > 1e-3 && first < 0) first = i;
      err = std::max(err, e);
      repeat = std::max(repeat, (again[i] - want[i]).abs().max().item<double>());
      if (covering)
        plain_err = std::max(plain_err, (whole[i] - want[i]).abs().max().item<double>());
    }
    const bool same = a.retrievals == b.retrievals && a.offloaded_units == b.offloaded_units &&
                      a.loaded_rows == b.loaded_rows;
    const bool pass = err <= 1e-3 && same && (!k.ragged || repeat <= 1e-5) && plain_err <= 1e-3;
    ok = ok && pass;
    std::fprintf(
        stderr,
        "%s recorded retrieval (run twice) vs per-layer, %s (f32, %lld in, %lld steps): "
        "max logit diff %.2e (first step over 1e-3: %lld; per-layer run twice%s: %.2e%s), "
        "retrievals "
        "%lld/%lld, offloaded units %lld/%lld\n",
        pass ? "PASS" : "FAIL", k.name.c_str(), static_cast<long long>(n),
        static_cast<long long>(steps), err, static_cast<long long>(first),
        k.ragged ? ", hidden slots poisoned" : "", repeat,
        covering ? (", vs the plain ragged decode " + std::to_string(plain_err)).c_str() : "",
        static_cast<long long>(b.retrievals), static_cast<long long>(a.retrievals),
        static_cast<long long>(b.offloaded_units), static_cast<long long>(a.offloaded_units));
    out.push_back({{"policy", k.name},
                   {"max_abs_logit_error", err},
                   {"first_step_over_tolerance", first},
                   {"per_layer_repeat_error", repeat},
                   {"ragged", k.ragged},
                   {"budget", k.budget},
                   {"plain_ragged_decode_error", plain_err},
                   {"tolerance", 1e-3},
                   {"retrievals_recorded", b.retrievals},
                   {"retrievals_per_layer", a.retrievals},
                   {"offloaded_units_recorded", b.offloaded_units},
                   {"offloaded_units_per_layer", a.offloaded_units},
                   {"pass", pass}});
  }
  return out;
}

// A greedy two-turn conversation under a retrieval policy spec on qwen2.5-0.5b's shape (f32,
// 4 layers, CUDA): 900 prompt tokens (prefilled in blocks of 512) and 96 out, then a 40-token
// question and 32 out; every step's logits kept (the offload and beside-the-prefill checks).
struct TwoTurnRun {
  std::unique_ptr<MemoryPolicy> policy;
  std::unique_ptr<KvWorkingSet> ws;
  std::vector<at::Tensor> logits;
  GenerationResult first, second;
};
TwoTurnRun two_turn_run(const Decoder& d, const std::string& spec) {
  const ModelConfig& c = d.config();
  const KvCacheShape shape{c.num_layers, c.num_kv_heads, c.head_dim};
  const std::vector<int64_t> prompt = spread_ids(900, 3, 7919),
                             question = spread_ids(40, 5, 104729);
  TwoTurnRun r;
  r.policy = make_policy(spec);
  r.ws = std::make_unique<KvWorkingSet>(shape, 0, d.dtype(), d.device(), c.max_positions);
  GenerationOptions options;
  options.max_new_tokens = 96;
  options.stop_at_eos = false;
  options.sampling.temperature = 0;
  options.on_logits = [&](const at::Tensor& l) { r.logits.push_back(l.cpu()); };
  r.first = generate(d, *r.policy, *r.ws, {}, prompt, options, {});
  std::vector<int64_t> history = prompt;
  history.insert(history.end(), r.first.tokens.begin(), r.first.tokens.end() - 1);
  options.max_new_tokens = 32;
  r.second = generate(d, *r.policy, *r.ws, history, question, options, {});
  return r;
}

// offload=1 through generate() on CUDA (the recorded step writes each token's KV of the retrieval
// layers into page-locked host memory through unified addressing): the same greedy tokens and
// logits, the same working set (read in place and after restore_layers()), the same next turn,
// and a decode peak of device memory lower by the moved layers' bytes.
nlohmann::json check_offloaded_working_set(bool& ok) {
  LoadedModel m = load_model({"", "qwen2.5-0.5b", 4}, choose_device("cuda", "f32"), {});
  const Decoder& d = *m.decoder;
  const ModelConfig& c = d.config();
  const KvCacheShape shape{c.num_layers, c.num_kv_heads, c.head_dim};
  const std::string spec = "louiskv:stride=4,sinks=16,window=32,budget=128,full_layers=1";
  TwoTurnRun resident = two_turn_run(d, spec + ",offload=0");
  TwoTurnRun offloaded = two_turn_run(d, spec + ",offload=1");
  double logit_diff = 0;
  for (size_t i = 0; i < std::min(resident.logits.size(), offloaded.logits.size()); ++i)
    logit_diff =
        std::max(logit_diff, (resident.logits[i] - offloaded.logits[i]).abs().max().item<double>());
  const auto same_kv = [&] {
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (!resident.ws->cache().keys(l).equal(offloaded.ws->cache().keys(l)) ||
          !resident.ws->cache().values(l).equal(offloaded.ws->cache().values(l)) ||
          !resident.ws->cache().keys(l).cpu().equal(offloaded.ws->cache().keys(l).cpu()))
        return false;
    return true;
  };
  const int64_t moved_layers = offloaded.ws->cache().host_layers();
  const bool kv_in_place = same_kv();
  offloaded.ws->cache().restore_layers();
  const bool kv_restored = same_kv();
  const int64_t capacity = offloaded.ws->cache().capacity();
  const int64_t moved_bytes = (c.num_layers - 1) * 2 * c.num_kv_heads * capacity * c.head_dim * 4;
  // At the first decode step (steady state: the peak also holds transient buffers, which on this
  // small model outweigh the moved layers).
  // The device memory the move frees, on a cache of the same shape (the two runs above share one
  // process, so their allocator figures include each other's leftovers; bench decode compares
  // separate processes): exactly the moved layers, and restore_layers() takes it back.
  int64_t saved = 0, restored = 0;
  {
    KvCache probe(shape, 1, capacity, d.dtype(), d.device());
    std::vector<int64_t> layers;
    for (int64_t l = 1; l < c.num_layers; ++l)
      layers.push_back(l);
    gpu::synchronize(d.device());
    const int64_t before = gpu::allocated_bytes(d.device());
    probe.move_layers_to_host(layers);
    gpu::synchronize(d.device());
    saved = before - gpu::allocated_bytes(d.device());
    probe.restore_layers();
    gpu::synchronize(d.device());
    restored = gpu::allocated_bytes(d.device()) - before;
  }
  const bool pass = resident.first.tokens == offloaded.first.tokens &&
                    resident.second.tokens == offloaded.second.tokens &&
                    resident.logits.size() == offloaded.logits.size() && logit_diff == 0 &&
                    moved_layers == c.num_layers - 1 && kv_in_place && kv_restored &&
                    saved == moved_bytes && restored == 0;
  ok = ok && pass;
  std::fprintf(stderr,
               "%s offloaded working set (louiskv offload=1 vs resident, f32, 900 in, 96 + 32 out, "
               "recorded step): max logit diff %.2e, tokens %s / %s, %lld layers in host memory, "
               "working set equal in place %d / restored %d, device bytes freed by the move %lld "
               "of %lld (after restore %lld more than before)\n",
               pass ? "PASS" : "FAIL", logit_diff,
               resident.first.tokens == offloaded.first.tokens ? "same" : "differ",
               resident.second.tokens == offloaded.second.tokens ? "same" : "differ",
               static_cast<long long>(moved_layers), kv_in_place, kv_restored,
               static_cast<long long>(saved), static_cast<long long>(moved_bytes),
               static_cast<long long>(restored));
  return {{"max_abs_logit_diff", logit_diff},
          {"same_tokens", resident.first.tokens == offloaded.first.tokens},
          {"same_next_turn", resident.second.tokens == offloaded.second.tokens},
          {"host_layers", moved_layers},
          {"working_set_equal_in_place", kv_in_place},
          {"working_set_equal_restored", kv_restored},
          {"moved_bytes", moved_bytes},
          {"freed_by_move_bytes", saved},
          {"restore_minus_before_bytes", restored},
          {"pass", pass}};
}

// LouisKV's prompt units and the offload's copies made beside the prefill on a side worker (the
// default) against after the first token (overlap=0), on CUDA where they really overlap: the
// same logits to the bit through the recorded step, both turns, the same working set in host
// memory; a 900-token prompt in blocks of 512 hands over only the last block's layers.
nlohmann::json check_units_beside_prefill(bool& ok) {
  LoadedModel m = load_model({"", "qwen2.5-0.5b", 4}, choose_device("cuda", "f32"), {});
  const Decoder& d = *m.decoder;
  const ModelConfig& c = d.config();
  const std::string spec = "louiskv:stride=4,sinks=16,window=32,budget=128,full_layers=1";
  const TwoTurnRun beside = two_turn_run(d, spec);
  const TwoTurnRun after = two_turn_run(d, spec + ",overlap=0");
  double logit_diff = 0;
  for (size_t i = 0; i < std::min(beside.logits.size(), after.logits.size()); ++i)
    logit_diff =
        std::max(logit_diff, (beside.logits[i] - after.logits[i]).abs().max().item<double>());
  bool same_kv = beside.ws->tokens() == after.ws->tokens();
  for (int64_t l = 0; l < c.num_layers && same_kv; ++l)
    same_kv = beside.ws->cache().keys(l).equal(after.ws->cache().keys(l)) &&
              beside.ws->cache().values(l).equal(after.ws->cache().values(l));
  const int64_t retrieval_layers = c.num_layers - 1;
  const bool pass = beside.first.tokens == after.first.tokens &&
                    beside.second.tokens == after.second.tokens &&
                    beside.logits.size() == after.logits.size() && logit_diff == 0 && same_kv &&
                    beside.first.retrieval.units_beside_prefill == retrieval_layers &&
                    beside.second.retrieval.units_beside_prefill == retrieval_layers &&
                    after.first.retrieval.units_beside_prefill == 0 &&
                    beside.ws->cache().host_layers() == retrieval_layers &&
                    after.ws->cache().host_layers() == retrieval_layers;
  ok = ok && pass;
  std::fprintf(stderr,
               "%s units beside the prefill (louiskv default vs overlap=0, f32, 900 in, 96 + 32 "
               "out, recorded step): max logit diff %.2e, tokens %s / %s, layers made beside %lld "
               "/ %lld, working set equal %d, host layers %lld / %lld\n",
               pass ? "PASS" : "FAIL", logit_diff,
               beside.first.tokens == after.first.tokens ? "same" : "differ",
               beside.second.tokens == after.second.tokens ? "same" : "differ",
               static_cast<long long>(beside.first.retrieval.units_beside_prefill),
               static_cast<long long>(beside.second.retrieval.units_beside_prefill), same_kv,
               static_cast<long long>(beside.ws->cache().host_layers()),
               static_cast<long long>(after.ws->cache().host_layers()));
  return {{"max_abs_logit_diff", logit_diff},
          {"same_tokens", beside.first.tokens == after.first.tokens},
          {"same_next_turn", beside.second.tokens == after.second.tokens},
          {"layers_made_beside", beside.first.retrieval.units_beside_prefill},
          {"worker_ms", beside.first.retrieval.beside_prefill_ms},
          {"working_set_equal", same_kv},
          {"pass", pass}};
}

// The decode GEMV (gpu/decode_linear.h) against an f32 product of the same bf16/f16 operands
// (rows 1-8, with and without a bias, K not a multiple of the lanes' stride), then its time and
// bandwidth beside at::linear (cuBLAS) on the 3B shape's decode projections and head.
nlohmann::json check_decode_linear(bool& ok) {
  nlohmann::json out;
  const at::Device cuda(at::kCUDA, 0);
  nlohmann::json rows_json = nlohmann::json::array();
  struct Shape {
    int64_t rows, n, k;
    bool bias;
  };
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    for (const Shape& sh :
         {Shape{1, 3072, 3072, false}, Shape{1, 5120, 3072, true}, Shape{2, 1000, 8200, false},
          Shape{3, 77, 136, true}, Shape{8, 4096, 1024, false}, Shape{5, 33, 8, true}}) {
      at::manual_seed(sh.n * 31 + sh.k);
      const at::Tensor x = at::randn({sh.rows, 1, sh.k}).to(dtype);
      const at::Tensor w =
          (at::randn({sh.n, sh.k}) / std::sqrt(static_cast<double>(sh.k))).to(dtype);
      const at::Tensor b = sh.bias ? at::randn({sh.n}).to(dtype) : at::Tensor();
      at::Tensor ref = at::matmul(x.to(at::kFloat), w.to(at::kFloat).t());
      if (sh.bias) ref = ref + b.to(at::kFloat);
      const at::Tensor xd = x.to(cuda), wd = w.to(cuda), bd = sh.bias ? b.to(cuda) : at::Tensor();
      const bool kernel = gpu::decode_linear_kernel_fits(xd, wd, bd);
      const at::Tensor got = gpu::decode_linear(xd, wd, bd).cpu().to(at::kFloat);
      // f32 sums in another order, one rounding to the dtype: within 2 of its ulps at the value.
      const double ulp = dtype == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
      const at::Tensor excess = (got - ref).abs() - (ref.abs() * ulp + 1e-3);
      const double worst = excess.max().item<double>();
      const bool pass = kernel && got.sizes() == ref.sizes() && worst <= 0;
      ok = ok && pass;
      std::fprintf(stderr, "%s decode_linear %s rows %lld n %lld k %lld%s: worst excess %.3g%s\n",
                   pass ? "PASS" : "FAIL", c10::toString(dtype), static_cast<long long>(sh.rows),
                   static_cast<long long>(sh.n), static_cast<long long>(sh.k),
                   sh.bias ? " +bias" : "", worst, kernel ? "" : " (kernel not taken)");
      rows_json.push_back({{"dtype", c10::toString(dtype)},
                           {"rows", sh.rows},
                           {"n", sh.n},
                           {"k", sh.k},
                           {"bias", sh.bias},
                           {"kernel", kernel},
                           {"worst_excess_over_2_ulp", worst},
                           {"pass", pass}});
    }
  }
  out["checks"] = rows_json;
  struct Timed {
    const char* name;
    int64_t n, k;
  };
  nlohmann::json timing = nlohmann::json::array();
  double kernel_total = 0, cublas_total = 0;
  for (const Timed& t :
       {Timed{"qkv", 5120, 3072}, Timed{"o", 3072, 3072}, Timed{"gate_up", 16384, 3072},
        Timed{"down", 3072, 8192}, Timed{"lm_head", 128256, 3072}}) {
    const auto opts = at::TensorOptions().device(cuda).dtype(at::kBFloat16);
    const at::Tensor x = at::randn({1, 1, t.k}, opts);
    // Several copies of W, used in turn, so that no run finds its weights in the 50 MB L2.
    std::vector<at::Tensor> ws;
    for (int i = 0; i < 4; ++i)
      ws.push_back(at::randn({t.n, t.k}, opts) / 64);
    const auto time = [&](const auto& fn) {
      return mean_device_us(cuda, 8, 200, [&](int i) { fn(ws[i % 4]); });
    };
    const double ours = time([&](const at::Tensor& w) { return gpu::decode_linear(x, w, {}); });
    const double cublas = time([&](const at::Tensor& w) { return at::linear(x, w); });
    const double bytes = static_cast<double>(t.n) * t.k * 2;
    if (std::string(t.name) != "lm_head") {
      kernel_total += ours;
      cublas_total += cublas;
    }
    std::fprintf(stderr,
                 "TIME decode_linear %s %lldx%lld bf16: kernel %.1f us (%.0f GB/s), at::linear "
                 "%.1f us (%.0f GB/s)\n",
                 t.name, static_cast<long long>(t.n), static_cast<long long>(t.k), ours,
                 bytes / ours / 1e3, cublas, bytes / cublas / 1e3);
    timing.push_back({{"name", t.name},
                      {"n", t.n},
                      {"k", t.k},
                      {"kernel_us", ours},
                      {"kernel_gbps", bytes / ours / 1e3},
                      {"at_linear_us", cublas},
                      {"at_linear_gbps", bytes / cublas / 1e3}});
  }
  std::fprintf(stderr,
               "TIME decode_linear one 3B layer's four projections: kernel %.1f us, "
               "at::linear %.1f us (launches back to back, not a graph)\n",
               kernel_total, cublas_total);
  out["timing_llama3.2-3b"] = timing;
  out["layer_projections_us"] = {{"kernel", kernel_total}, {"at_linear", cublas_total}};
  return out;
}

// The decode GEMV with its folds (gpu/decode_linear.h: RMSNorm before, SiLU gate and residual
// after) against the same steps as separate kernels: the same bits, for 1-8 rows, both 16-bit
// dtypes, with a bias, and where the normalized rows overflow the kernel's shared memory (the
// separate steps run instead, still the same bits).
nlohmann::json check_decode_linear_fused(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  const at::Device cuda(at::kCUDA, 0);
  struct Shape {
    int64_t rows, n, k;
    bool norm, glu, residual, bias;
  };
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    const auto opts = at::TensorOptions().device(cuda).dtype(dtype);
    for (const Shape& sh : {Shape{1, 5120, 3072, true, false, false, true},
                            Shape{1, 16384, 3072, true, true, false, false},
                            Shape{1, 3072, 3072, false, false, true, false},
                            Shape{1, 3072, 8192, false, false, true, false},
                            Shape{3, 200, 136, true, true, true, true},
                            Shape{8, 4096, 3072, true, false, false, false},
                            Shape{8, 512, 4096, true, true, false, false},
                            Shape{2, 128256, 3072, true, false, false, false}}) {
      at::manual_seed(sh.n + 7 * sh.k + sh.rows);
      const at::Tensor x = (2 * at::randn({sh.rows, 1, sh.k})).to(opts);
      const at::Tensor w = (at::randn({sh.n, sh.k}) / std::sqrt(double(sh.k))).to(opts);
      const at::Tensor b = sh.bias ? at::randn({sh.n}).to(opts) : at::Tensor();
      const at::Tensor nw = (1 + at::randn({sh.k}) / 4).to(opts);
      const int64_t outs = sh.glu ? sh.n / 2 : sh.n;
      const at::Tensor res = at::randn({sh.rows, 1, outs}).to(opts);
      gpu::DecodeLinearFusion f;
      if (sh.norm) f.norm_weight = nw, f.norm_eps = 1e-5;
      if (sh.glu) f.glu_inter = outs;
      if (sh.residual) f.residual = res;
      const bool kernel = gpu::decode_linear_kernel_fits(x, w, b, f);
      const at::Tensor got = gpu::decode_linear(x, w, b, f);
      at::Tensor want = sh.norm ? gpu::rms_norm(x, nw, 1e-5) : x;
      want = gpu::decode_linear(want, w, b);
      if (sh.glu) want = gpu::silu_mul(want, outs);
      if (sh.residual) want = res + want;
      const int64_t bad =
          got.sizes() == want.sizes() ? elements_differing(got, want) : got.numel() + 1;
      // 8 normalized rows of K >= 3,072 (48 KiB and more) are past the kernel's shared memory.
      const bool expect_kernel = !(sh.norm && sh.rows * sh.k * 2 > 47 * 1024);
      const bool pass = bad == 0 && kernel == expect_kernel;
      ok = ok && pass;
      std::fprintf(
          stderr, "%s decode_linear fused %s rows %lld n %lld k %lld%s%s%s%s: %lld differ%s\n",
          pass ? "PASS" : "FAIL", c10::toString(dtype), static_cast<long long>(sh.rows),
          static_cast<long long>(sh.n), static_cast<long long>(sh.k), sh.norm ? " +norm" : "",
          sh.glu ? " +glu" : "", sh.residual ? " +residual" : "", sh.bias ? " +bias" : "",
          static_cast<long long>(bad), kernel ? "" : " (separate steps)");
      out.push_back({{"dtype", c10::toString(dtype)},
                     {"rows", sh.rows},
                     {"n", sh.n},
                     {"k", sh.k},
                     {"norm", sh.norm},
                     {"glu", sh.glu},
                     {"residual", sh.residual},
                     {"bias", sh.bias},
                     {"kernel", kernel},
                     {"elements_differing", bad},
                     {"pass", pass}});
    }
  }
  return out;
}

// EpiCache's patch score kernels (gpu/softmax_column_max.h) against torch's logsumexp + max on
// the device: rows hidden entirely, columns no row sees, a row of one visible column; then the
// time of both on a patch of the 3B shape (8 KV heads x 3 query heads x 512 rows, 10,240 keys).
nlohmann::json check_softmax_column_max(bool& ok) {
  nlohmann::json out;
  nlohmann::json rows = nlohmann::json::array();
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  struct Shape {
    int64_t b, h, n, c;
  };
  for (const Shape& sh : {Shape{1, 2, 5, 37}, Shape{1, 8, 96, 1000}, Shape{2, 3, 300, 4099}}) {
    at::manual_seed(sh.n + sh.c);
    at::Tensor scores = 6 * at::randn({sh.b, sh.h, sh.n, sh.c}, opts);
    scores.masked_fill_(at::rand({sh.b, sh.h, sh.n, sh.c}, opts).lt(0.2), neg_inf);
    scores.select(2, 0).fill_(neg_inf);                          // a row that sees nothing
    scores.select(3, sh.c - 1).fill_(neg_inf);                   // a column no row sees
    scores.select(2, 1).fill_(neg_inf).select(2, 3).fill_(2.0);  // one visible column
    const at::Tensor got = gpu::softmax_column_max(scores);
    const at::Tensor want = gpu::softmax_column_max_reference(scores);
    const double err = (got - want).abs().max().item<double>();
    const bool pass = got.sizes() == want.sizes() && err <= 2e-6 &&
                      got.select(2, sh.c - 1).abs().max().item<double>() == 0.0;
    ok = ok && pass;
    std::fprintf(stderr, "%s softmax_column_max [%lld, %lld, %lld, %lld]: max abs error %.3g\n",
                 pass ? "PASS" : "FAIL", static_cast<long long>(sh.b), static_cast<long long>(sh.h),
                 static_cast<long long>(sh.n), static_cast<long long>(sh.c), err);
    rows.push_back({{"shape", {sh.b, sh.h, sh.n, sh.c}}, {"max_abs_error", err}, {"pass", pass}});
  }
  out["checks"] = rows;
  const at::Tensor scores = 4 * at::randn({1, 8, 3 * 512, 10240}, opts);
  const auto time = [&](const auto& fn) {
    return mean_device_us(scores.device(), 3, 20, [&](int) { fn(); });
  };
  const double kernel = time([&] { return gpu::softmax_column_max(scores); });
  const double torch_ops = time([&] { return gpu::softmax_column_max_reference(scores); });
  std::fprintf(stderr,
               "TIME softmax_column_max 3B patch [1, 8, 1536, 10240] f32: kernel %.1f us, torch "
               "ops %.1f us\n",
               kernel, torch_ops);
  out["timing_3b_patch_us"] = {{"kernel", kernel}, {"torch_ops", torch_ops}};
  return out;
}

// EpiCache's patch score (cached_attention_max) with bf16 operands on the device, where the
// scores are one tensor-core GEMM with f32 output, against the CPU's f32 path on the same values:
// a cache longer than the scored keys, a ragged set hiding some, then the time of the device's
// GEMM against the f32 FFMA GEMM it replaced (the 3B shape's patch: 8 KV heads x 3 x 160 rows
// over 10,240 keys).
nlohmann::json check_cached_attention_max(bool& ok) {
  nlohmann::json out;
  nlohmann::json rows = nlohmann::json::array();
  struct Case {
    int64_t hkv, g, r, d, cached, capacity;
    bool ragged;
    bool causal = false;  // the rows are the last r of the cached keys (EpiCache's snapkv window)
  };
  for (const Case& c :
       {Case{2, 2, 7, 64, 300, 320, false}, Case{8, 3, 160, 128, 10240, 10400, false},
        Case{4, 4, 33, 128, 2049, 2100, true}, Case{8, 4, 64, 128, 8704, 8800, false, true},
        Case{4, 4, 33, 128, 2049, 2100, true, true}}) {
    at::manual_seed(c.cached + c.r);
    const at::Tensor q = at::randn({1, c.hkv * c.g, c.r, c.d}).to(at::kBFloat16);
    const at::Tensor keys = at::randn({1, c.hkv, c.capacity, c.d}).to(at::kBFloat16);
    const at::Tensor values = at::randn({1, c.hkv, c.capacity, c.d}).to(at::kBFloat16);
    const int64_t first = c.causal ? c.cached - c.r : c.cached;
    const at::Tensor positions = at::arange(first, first + c.r, at::kLong).unsqueeze(0);
    at::Tensor valid;
    if (c.ragged) valid = at::rand({1, c.hkv, c.capacity}).gt(0.1);
    const auto score = [&](at::Device dev) {
      AttendKv kv;
      kv.keys = keys.to(dev);
      kv.values = values.to(dev);
      kv.key_positions = at::arange(c.capacity, at::kLong).view({1, -1}).to(dev);
      if (valid.defined()) kv.key_valid = valid.to(dev);
      return cached_attention_max(q.to(dev), kv, positions.to(dev), std::nullopt, c.cached,
                                  c.causal)
          .to(at::kCPU);
    };
    const at::Tensor got = score(at::Device(at::kCUDA, 0));
    const at::Tensor want = score(at::Device(at::kCPU));
    const double err = (got - want).abs().max().item<double>();
    const bool pass = got.sizes() == want.sizes() && err <= 1e-5;
    ok = ok && pass;
    std::fprintf(stderr,
                 "%s cached_attention_max bf16 [%lld x %lld, %lld rows, %lld keys%s%s]: max abs "
                 "error %.3g\n",
                 pass ? "PASS" : "FAIL", static_cast<long long>(c.hkv), static_cast<long long>(c.g),
                 static_cast<long long>(c.r), static_cast<long long>(c.cached),
                 c.ragged ? ", ragged" : "", c.causal ? ", causal" : "", err);
    rows.push_back({{"kv_heads", c.hkv},
                    {"group", c.g},
                    {"rows", c.r},
                    {"cached", c.cached},
                    {"ragged", c.ragged},
                    {"causal", c.causal},
                    {"max_abs_error", err},
                    {"pass", pass}});
  }
  out["checks"] = rows;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({1, 24, 160, 128}, opts);
  const at::Tensor keys = at::randn({1, 8, 10240, 128}, opts);
  const double scale = 1.0 / std::sqrt(128.0);
  const double tensor_cores = mean_device_us(q.device(), 3, 20, [&](int) {
    (void)at::bmm(q.reshape({8, 480, 128}), keys.view({8, 10240, 128}).transpose(1, 2), at::kFloat)
        .mul_(scale);
  });
  const double f32 = mean_device_us(q.device(), 3, 20, [&](int) {
    (void)at::matmul(q.reshape({1, 8, 480, 128}).to(at::kFloat) * scale,
                     keys.to(at::kFloat).transpose(-1, -2));
  });
  std::fprintf(stderr,
               "TIME patch scores 3B [8, 480 rows, 10240 keys]: bf16 GEMM f32 out %.1f us, f32 "
               "operands %.1f us\n",
               tensor_cores, f32);
  out["timing_3b_patch_scores_us"] = {{"bf16_f32_out", tensor_cores}, {"f32_operands", f32}};
#endif
  return out;
}

// The paged pool's pinned slab (gpu::exact_pinned): page-locked (is_pinned, an asynchronous
// round trip through the device returns the same bytes, kernels read it in place through
// device_view_of_pinned), then the time to lock an episode pool's 4.8 GB against PyTorch's
// caching host allocator (which rounds the request up to 8 GB).
nlohmann::json check_exact_pinned(bool& ok) {
  nlohmann::json out;
  at::Tensor slab = gpu::exact_pinned({3, 5 << 20}, at::kFloat);  // 60 MiB
  slab.copy_(at::randn({3, 5 << 20}));
  const at::Tensor on_device = slab.to(at::Device(at::kCUDA, 0), /*non_blocking=*/true);
  at::Tensor back = gpu::exact_pinned({3, 5 << 20}, at::kFloat);
  back.copy_(on_device.mul(2), /*non_blocking=*/true);
  gpu::synchronize(on_device.device());
  const bool round_trip = back.equal(slab.mul(2));
  const at::Tensor in_place = gpu::device_view_of_pinned(slab, on_device.device());
  const double view_err = (in_place.sum(1).cpu() - slab.sum(1)).abs().max().item<double>();
  const bool pass = slab.is_pinned() && round_trip && view_err <= 1e-1;
  ok = ok && pass;
  std::fprintf(stderr, "%s exact_pinned: pinned %d, round trip %d, in-place read error %.3g\n",
               pass ? "PASS" : "FAIL", slab.is_pinned() ? 1 : 0, round_trip ? 1 : 0, view_err);
  out["pinned"] = slab.is_pinned();
  out["round_trip_equal"] = round_trip;
  out["in_place_sum_error"] = view_err;
  const int64_t bytes = int64_t{4800} << 20;
  const auto timed_ms = [](const auto& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  double exact_ms = 0, caching_ms = 0;
  {
    at::Tensor a;
    exact_ms = timed_ms([&] { a = gpu::exact_pinned({bytes}, at::kByte); });
  }
  {
    at::Tensor b;
    caching_ms = timed_ms(
        [&] { b = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true)); });
  }
  std::fprintf(
      stderr,
      "TIME pinning 4.8 GB: exact_pinned %.0f ms, PyTorch's caching host allocator %.0f ms "
      "(rounded up to 8 GB)\n",
      exact_ms, caching_ms);
  out["timing_lock_4800_mib_ms"] = {{"exact_pinned", exact_ms}, {"caching_allocator", caching_ms}};
  return out;
}

// The split-slot decode attention kernel (gpu/decode_attention.h) against its reference body on
// the device (f32 matmuls): dtypes, head dims, group sizes, holes, windows, per-head valid slots,
// rows of different lengths, never-written slots holding NaN. Then its speed on the 3B shape
// (28 layers, 8 KV heads, g = 3) at a recorded capacity of 1.25x, against the torch path the
// recorded step used before (baddbmm, softmax, bmm over the whole capacity).
nlohmann::json check_decode_attention(bool& ok) {
  nlohmann::json out;
  nlohmann::json rows_out = nlohmann::json::array();
  const at::Device cuda(at::kCUDA, 0);
  struct Case {
    at::ScalarType dtype;
    int64_t d, g, slots;
    int64_t window;
    bool valid;
    int64_t hkv = 2;  // 8 with long caches: many tiles per block, the copies pipelined
  };
  std::vector<Case> cases;
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t d : {64, 128, 256}) {
      if (d == 256 && dtype == at::kFloat) continue;
      for (int64_t g : {1, 3, 4, 7, 8}) {
        cases.push_back({dtype, d, g, g == 3 ? 5000 : 700, g == 4 ? 300 : 0, g == 7});
      }
    }
  }
  cases.push_back({at::kBFloat16, 128, 3, 1, 0, false});
  cases.push_back({at::kBFloat16, 128, 3, 256, 0, false});
  cases.push_back({at::kBFloat16, 96, 3, 300, 0, false});  // not the kernel's: the reference
  cases.push_back({at::kBFloat16, 128, 3, 40000, 0, false, 8});
  cases.push_back({at::kBFloat16, 128, 4, 30000, 1000, true, 8});
  cases.push_back({at::kHalf, 64, 8, 20000, 0, true, 8});
  cases.push_back({at::kFloat, 128, 3, 20000, 0, false, 8});
  for (const Case& c : cases) {
    at::manual_seed(c.d * 131 + c.g * 7 + c.slots);
    const int64_t rows = 2, hkv = c.hkv, hq = hkv * c.g;
    const auto on = at::TensorOptions().device(cuda);
    const at::Tensor q = at::randn({rows, hq, c.d}, on).to(c.dtype);
    at::Tensor keys = at::randn({rows, hkv, c.slots, c.d}, on).to(c.dtype);
    at::Tensor values = at::randn({rows, hkv, c.slots, c.d}, on).to(c.dtype);
    at::Tensor kpos = at::arange(c.slots, on.dtype(at::kLong)).unsqueeze(0).repeat({rows, 1});
    if (c.slots > 10) kpos[0].narrow(0, 3, 5).fill_(-1);
    const int64_t last0 = std::max<int64_t>(0, c.slots / 2 - 1), last1 = c.slots - 1;
    if (last0 + 1 < c.slots) {
      keys[0].narrow(1, last0 + 1, c.slots - last0 - 1).fill_(NAN);
      values[0].narrow(1, last0 + 1, c.slots - last0 - 1).fill_(NAN);
    }
    const at::Tensor last = at::tensor(std::vector<int64_t>{last0, last1}, at::kLong).to(cuda);
    const at::Tensor pos = last.clone();
    at::Tensor valid;
    if (c.valid) valid = at::rand({rows, hkv, c.slots}, on).gt(0.2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    const at::Tensor got =
        gpu::decode_attention(q, keys, values, kpos, valid, pos, last, c.window, scale);
    const at::Tensor ref =
        gpu::decode_attention_reference(q, keys, values, kpos, valid, pos, last, c.window, scale);
    const double err = (got.to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<double>();
    const double tol = c.dtype == at::kFloat ? 1e-4 : 2e-2;
    const bool pass = err <= tol && std::isfinite(err);
    ok = ok && pass;
    std::fprintf(stderr,
                 "%s decode_attention %s d=%ld g=%ld hkv=%ld slots=%ld window=%ld valid=%d: %.3g\n",
                 pass ? "PASS" : "FAIL", c10::toString(c.dtype), long(c.d), long(c.g), long(c.hkv),
                 long(c.slots), long(c.window), int(c.valid), err);
    rows_out.push_back({{"dtype", c10::toString(c.dtype)},
                        {"head_dim", c.d},
                        {"group", c.g},
                        {"kv_heads", c.hkv},
                        {"slots", c.slots},
                        {"window", c.window},
                        {"valid", c.valid},
                        {"kernel", gpu::decode_attention_kernel_fits(q, keys, values, kpos, valid)},
                        {"max_abs_error", err},
                        {"tolerance", tol}});
  }
  out["vs_reference"] = rows_out;

  // Recorded in a CUDA graph and replayed with new queries each time, as the recorded decode step
  // runs it: each replay matches the reference for its own queries (state a kernel keeps between
  // launches, such as an arrival counter, must be left clean by every replay).
  nlohmann::json replays_out = nlohmann::json::array();
  for (const Case& c : {Case{at::kBFloat16, 128, 3, 20000, 0, false, 8},
                        Case{at::kHalf, 64, 8, 700, 300, true, 2}}) {
    at::manual_seed(c.d * 17 + c.slots);
    const int64_t rows = 2, hkv = c.hkv, hq = hkv * c.g;
    const auto on = at::TensorOptions().device(cuda);
    at::Tensor q = at::randn({rows, hq, c.d}, on).to(c.dtype);
    const at::Tensor keys = at::randn({rows, hkv, c.slots, c.d}, on).to(c.dtype);
    const at::Tensor values = at::randn({rows, hkv, c.slots, c.d}, on).to(c.dtype);
    const at::Tensor kpos = at::arange(c.slots, on.dtype(at::kLong)).unsqueeze(0).repeat({rows, 1});
    const at::Tensor last =
        at::tensor(std::vector<int64_t>{c.slots / 3, c.slots - 1}, at::kLong).to(cuda);
    const at::Tensor pos = last.clone();
    at::Tensor valid;
    if (c.valid) valid = at::rand({rows, hkv, c.slots}, on).gt(0.2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    at::Tensor got;
    gpu::DeviceGraph graph(cuda);
    graph.capture([&] {
      got = gpu::decode_attention(q, keys, values, kpos, valid, pos, last, c.window, scale);
    });
    double worst = 0.0;
    for (int replay = 0; replay < 3; ++replay) {
      q.copy_(at::randn({rows, hq, c.d}, on).to(c.dtype));
      graph.replay();
      const at::Tensor ref =
          gpu::decode_attention_reference(q, keys, values, kpos, valid, pos, last, c.window, scale);
      const double err = (got.to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<double>();
      worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
    }
    const bool pass = worst <= 2e-2;
    ok = ok && pass;
    std::fprintf(stderr,
                 "%s decode_attention in a CUDA graph, 3 replays, %s d=%ld g=%ld hkv=%ld "
                 "slots=%ld: %.3g\n",
                 pass ? "PASS" : "FAIL", c10::toString(c.dtype), long(c.d), long(c.g), long(c.hkv),
                 long(c.slots), worst);
    replays_out.push_back({{"dtype", c10::toString(c.dtype)},
                           {"head_dim", c.d},
                           {"group", c.g},
                           {"kv_heads", c.hkv},
                           {"slots", c.slots},
                           {"replays", 3},
                           {"max_abs_error", worst},
                           {"tolerance", 2e-2}});
  }
  out["graph_replays"] = replays_out;

  nlohmann::json speed = nlohmann::json::array();
  const int64_t layers = 28, hkv = 8, g = 3, d = 128;
  for (int64_t used : {10240, 32768, 90000}) {
    const int64_t capacity = (used + used / 4 + 255) / 256 * 256;
    const auto on = at::TensorOptions().device(cuda).dtype(at::kBFloat16);
    std::vector<at::Tensor> keys, values;
    for (int64_t l = 0; l < layers; ++l) {
      keys.push_back(at::randn({1, hkv, capacity, d}, on));
      values.push_back(at::randn({1, hkv, capacity, d}, on));
    }
    at::Tensor kpos = at::full({1, capacity}, -1, on.dtype(at::kLong));
    kpos.narrow(1, 0, used).copy_(at::arange(used, on.dtype(at::kLong)));
    const at::Tensor last = at::full({1}, used - 1, on.dtype(at::kLong));
    const at::Tensor q = at::randn({1, hkv * g, d}, on);
    const double scale = 1.0 / std::sqrt(double(d));
    const at::Tensor bias =
        at::zeros({hkv, 1, capacity}, on)
            .masked_fill_(kpos.lt(0).view({1, 1, capacity}).expand({hkv, 1, capacity}),
                          -std::numeric_limits<double>::infinity());
    const auto time_ms = [&](const std::function<void()>& fn) {
      fn();
      gpu::synchronize(cuda);
      const int reps = 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r)
        fn();
      gpu::synchronize(cuda);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                 .count() /
             reps;
    };
    const auto all_layers = [&] {
      for (int64_t l = 0; l < layers; ++l)
        gpu::decode_attention(q, keys[l], values[l], kpos, at::Tensor(), last, last, 0, scale);
    };
    const double kernel_ms = time_ms(all_layers);
    // Replayed as the decode step runs it (one graph): the device's time alone, where the eager
    // loop at short caches measures the host's launches.
    gpu::DeviceGraph graph(cuda);
    graph.capture(all_layers);
    const double graph_ms = time_ms([&] { graph.replay(); });
    const double torch_ms = time_ms([&] {
      for (int64_t l = 0; l < layers; ++l) {
        const at::Tensor scores =
            at::baddbmm(bias, q.view({hkv, g, d}), keys[l].view({hkv, capacity, d}).transpose(1, 2),
                        1.0, scale);
        at::bmm(at::softmax(scores, -1, at::kFloat).to(at::kBFloat16),
                values[l].view({hkv, capacity, d}));
      }
    });
    const double used_gb = 2.0 * layers * hkv * used * d * 2 / 1e9;
    const double capacity_gb = 2.0 * layers * hkv * capacity * d * 2 / 1e9;
    std::fprintf(
        stderr,
        "decode_attention 3B shape, %ld of %ld slots: kernel in a graph %.3f ms (%.0f GB/s "
        "of the held KV), eager %.3f ms, torch path %.3f ms (%.0f GB/s of the capacity)\n",
        long(used), long(capacity), graph_ms, used_gb / graph_ms * 1e3, kernel_ms, torch_ms,
        capacity_gb / torch_ms * 1e3);
    speed.push_back({{"slots_used", used},
                     {"capacity", capacity},
                     {"layers", layers},
                     {"kernel_ms", kernel_ms},
                     {"kernel_graph_ms", graph_ms},
                     {"kernel_graph_GBps_of_held_kv", used_gb / graph_ms * 1e3},
                     {"kernel_GBps_of_held_kv", used_gb / kernel_ms * 1e3},
                     {"torch_path_ms", torch_ms},
                     {"torch_path_GBps_of_capacity", capacity_gb / torch_ms * 1e3}});
  }
  out["speed_3b_shape_28_layers"] = speed;
  return out;
}

// The batched recorded step (OxyGen's language requests, several rows at their own lengths)
// against the per-layer batched forward on the device, fed the same tokens: f32 logits within
// 1e-3 on qwen2.5-0.5b's shape, a waiting row keeps its length; then the time of one step at
// 1, 4 and 8 rows on qwen2.5-7b's shape (bf16, ~600-token rows) both ways.
nlohmann::json check_batched_step(bool& ok) {
  nlohmann::json out;
  const auto rows_of = [](const Decoder& d, const std::vector<int64_t>& lengths) {
    const ModelConfig& c = d.config();
    std::vector<std::unique_ptr<KvCache>> own;
    std::vector<KvRowRef> refs;
    for (size_t r = 0; r < lengths.size(); ++r) {
      std::vector<int64_t> ids(lengths[r]);
      for (int64_t i = 0; i < lengths[r]; ++i)
        ids[i] = 3 + (i * 7919 + r * 131) % 30000;
      own.push_back(
          std::make_unique<KvCache>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim}, 1,
                                    lengths[r], d.dtype(), d.device()));
      gpu::DeviceTimeline tl(d.device());
      prefill(d, *own.back(), ids, 2048, tl, nullptr);
      refs.push_back({own.back().get(), 0});
    }
    return gather_kv_rows(refs, 64, d.device());
  };
  {
    LoadedModel m = load_model({"", "qwen2.5-0.5b", 3}, choose_device("cuda", "f32"), {});
    const Decoder& d = *m.decoder;
    const std::vector<int64_t> lengths{37, 300, 121};
    auto graph_kv = rows_of(d, lengths);
    auto eager_kv = rows_of(d, lengths);
    StaticDecodeStep step(d, *graph_kv);
    double err = 0;
    bool lengths_ok = true;
    std::vector<int64_t> tokens{11, 12, 13};
    for (int s = 0; s < 12; ++s) {
      // Row 1 waits on steps 4..7 (a finished request's filler row).
      const bool waits = s >= 4 && s < 8;
      const std::vector<bool> advance{true, !waits, true};
      std::vector<int64_t> positions(3);
      for (int r = 0; r < 3; ++r)
        positions[r] = graph_kv->lengths()[r];
      const at::Tensor got = step.step_rows(tokens, positions, advance).cpu();
      ForwardRequest req;
      req.phase = ForwardPhase::kDecode;
      for (int r = 0; r < 3; ++r) {
        req.tokens.push_back({tokens[r]});
        req.positions.push_back({eager_kv->lengths()[r]});
      }
      const std::vector<int64_t> before = eager_kv->lengths();
      CacheKvSource source(*eager_kv);
      gpu::DeviceTimeline tl(d.device());
      const at::Tensor want = d.forward(req, source, tl, nullptr).logits.select(1, 0).cpu();
      for (int r = 0; r < 3; ++r) {
        if (!advance[r]) {
          eager_kv->truncate(r, before[r]);
          continue;
        }
        err = std::max(err, (got[r] - want[r]).abs().max().item<double>());
        tokens[r] = want[r].argmax().item<int64_t>();
      }
      lengths_ok = lengths_ok && graph_kv->lengths() == eager_kv->lengths();
    }
    const bool pass = err <= 1e-3 && lengths_ok && step.recordings() == 1;
    ok = ok && pass;
    std::fprintf(stderr, "%s batched recorded step vs per-layer (f32, 3 rows, 12 steps): %.2e%s\n",
                 pass ? "PASS" : "FAIL", err, lengths_ok ? "" : " (lengths differ)");
    out["f32_rows_3"] = {{"max_abs_logit_error", err},
                         {"tolerance", 1e-3},
                         {"lengths_agree", lengths_ok},
                         {"recordings", step.recordings()}};
  }
  LoadedModel m = load_model({"", "qwen2.5-7b", 1}, choose_device("cuda", "bf16"), {});
  const Decoder& d = *m.decoder;
  nlohmann::json timing = nlohmann::json::array();
  for (int64_t rows : {1, 4, 8}) {
    std::vector<int64_t> lengths;
    for (int64_t r = 0; r < rows; ++r)
      lengths.push_back(560 + 13 * r);
    auto kv = rows_of(d, lengths);
    StaticDecodeStep step(d, *kv);
    const std::vector<int64_t> tokens(rows, 17);
    const std::vector<bool> advance(rows, false);  // same slots every step: a fixed workload
    double graph_ms = 1e30, eager_ms = 1e30;
    for (int rep = 0; rep < 4; ++rep) {
      gpu::synchronize(d.device());
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 20; ++i)
        step.step_rows(tokens, kv->lengths(), advance);
      gpu::synchronize(d.device());
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < 20; ++i) {
        ForwardRequest req;
        req.phase = ForwardPhase::kDecode;
        for (int64_t r = 0; r < rows; ++r) {
          req.tokens.push_back({17});
          req.positions.push_back({kv->lengths()[r]});
        }
        const std::vector<int64_t> before = kv->lengths();
        CacheKvSource source(*kv);
        gpu::DeviceTimeline tl(d.device());
        d.forward(req, source, tl, nullptr);
        for (int64_t r = 0; r < rows; ++r)
          kv->truncate(r, before[r]);
      }
      gpu::synchronize(d.device());
      auto t2 = std::chrono::steady_clock::now();
      if (rep == 0) continue;  // warm-up (and the recording)
      graph_ms =
          std::min(graph_ms, std::chrono::duration<double, std::milli>(t1 - t0).count() / 20);
      eager_ms =
          std::min(eager_ms, std::chrono::duration<double, std::milli>(t2 - t1).count() / 20);
    }
    std::fprintf(stderr,
                 "TIME oxygen batched step qwen2.5-7b bf16, %lld rows of ~600 tokens: recorded "
                 "%.2f ms, per-layer %.2f ms\n",
                 static_cast<long long>(rows), graph_ms, eager_ms);
    timing.push_back({{"rows", rows}, {"recorded_ms", graph_ms}, {"per_layer_ms", eager_ms}});
  }
  out["qwen2.5-7b_bf16_step_timing"] = timing;
  return out;
}

}  // namespace

// KEEP's probe kernel (gpu/unit_attention_mass.h) against its CPU reference: the 14B shape's
// heads and a 40-segment prompt, a small shape, rows that see a single key, units with gaps
// between them and one past the keys.
nlohmann::json check_unit_attention_mass(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  struct Shape {
    int64_t heads, rows, t, units;
  };
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const Shape& sh : {Shape{40, 37, 4135, 20}, Shape{8, 5, 100, 3}, Shape{4, 3, 33, 6}}) {
      at::manual_seed(sh.t + sh.rows);
      const at::Tensor scores = (4 * at::randn({sh.heads, sh.rows, sh.t})).to(dtype);
      at::Tensor positions = at::randint(0, sh.t, {sh.rows}, at::kLong);
      positions[0] = 0;
      positions[sh.rows - 1] = sh.t - 1;
      std::vector<int64_t> begins, ends;
      for (int64_t u = 0; u < sh.units; ++u) {
        begins.push_back(u * sh.t / sh.units + 1);  // a key between units belongs to none
        ends.push_back(std::min(sh.t + 4, (u + 1) * sh.t / sh.units + (u + 1 == sh.units ? 4 : 0)));
      }
      const at::Tensor b = at::tensor(begins, at::kLong), e = at::tensor(ends, at::kLong);
      const double scale = 1.0 / std::sqrt(128.0);
      const at::Tensor ref = gpu::unit_attention_mass_reference(scores, positions, b, e, scale);
      const at::Tensor got =
          gpu::unit_attention_mass(scores.cuda(), positions.cuda(), b.cuda(), e.cuda(), scale)
              .cpu();
      const double err = (got - ref).abs().max().item<double>();
      const double tol = 2e-6;
      ok = ok && err <= tol;
      out.push_back({{"dtype", c10::toString(dtype)},
                     {"heads", sh.heads},
                     {"rows", sh.rows},
                     {"keys", sh.t},
                     {"units", sh.units},
                     {"max_abs_error", err},
                     {"tolerance", tol}});
      if (err > tol)
        std::fprintf(stderr, "FAIL unit_attention_mass %s t=%lld err %g\n", c10::toString(dtype),
                     static_cast<long long>(sh.t), err);
    }
  }
  return out;
}

// EpiCache's joint selection (per_head=2, Ada-KV) ranked on the device against the same shrink
// on the CPU: 8 KV heads, 4,096 cached tokens, scores in twentieths (ties everywhere), layer
// budgets below the slot budget so heads share unevenly; the same lists, head for head.
nlohmann::json check_joint_selection(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  const at::Device cuda(at::kCUDA, 0);
  const int64_t heads = 8, group = 4, tokens = 4096, budget = 1024;
  for (const int64_t m : {int64_t{768}, int64_t{256}}) {
    at::manual_seed(31 + m);
    const at::Tensor probs =
        at::randint(0, 20, {1, heads * group, 1, tokens + 1}).to(at::kFloat) / 20;
    std::vector<KeepPlan> plans;
    for (const at::Device where : {at::Device(at::kCPU), cuda}) {
      EpiCacheOptions o;
      o.per_head = 2;
      EpiCachePolicy policy(o);
      policy.set_budget(budget);
      policy.set_layer_budgets({m});
      policy.set_patch({7});
      LayerView view;
      view.probs = probs.to(where);
      view.k = at::zeros({1, heads, 1, 4}, at::TensorOptions().device(where));
      policy.on_layer(view);
      WorkingSetInfo ws;
      ws.tokens = tokens;
      ws.layers = 1;
      ws.kv_heads = heads;
      plans.push_back(*policy.shrink(ws, budget));
    }
    int64_t kept = 0, shortest = tokens, longest = 0;
    bool same = true;
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<int64_t> a = plans[0].list(0, h), b = plans[1].list(0, h);
      same = same && a == b;
      kept += static_cast<int64_t>(b.size());
      shortest = std::min<int64_t>(shortest, static_cast<int64_t>(b.size()));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(b.size()));
    }
    const bool pass = same && kept == m * heads;
    ok = ok && pass;
    std::fprintf(stderr,
                 "%s epicache joint selection on the device vs the CPU: M=%lld of %lld slots, "
                 "%lld heads x %lld tokens, lists %lld..%lld\n",
                 pass ? "PASS" : "FAIL", static_cast<long long>(m), static_cast<long long>(budget),
                 static_cast<long long>(heads), static_cast<long long>(tokens),
                 static_cast<long long>(shortest), static_cast<long long>(longest));
    out.push_back({{"layer_budget", m},
                   {"slot_budget", budget},
                   {"kept_pairs", kept},
                   {"shortest_list", shortest},
                   {"longest_list", longest},
                   {"pass", pass}});
  }
  return out;
}

// A plan handed over as slots on the device (KeepPlan::slots: EpiCache's shrinks) leaves a bf16
// working set bit for bit as the same plan as host lists does: a ragged plan, then one over the
// ragged set. Times both at the 8B shape (32 layers x 8 KV heads, 8,704 slots to ~8,192): the
// lists' time counts their copy from the device and their build on the host (what EpiCache's
// shrink did before), the slots' time everything the runner does with them.
nlohmann::json check_slots_plan(bool& ok) {
  nlohmann::json out = nlohmann::json::array();
  const at::Device cuda(at::kCUDA, 0);
  struct Case {
    const char* name;
    int64_t layers, tokens, kept;
  };
  for (const Case& k :
       {Case{"4 layers, 600 slots", 4, 600, 400}, Case{"8B shape, 8704 slots", 32, 8704, 8192}}) {
    at::manual_seed(k.layers);
    const KvCacheShape shape{k.layers, 8, 128};
    const at::Tensor inv_freq =
        (1.0 / at::pow(500000.0, at::arange(0, 128, 2, at::kDouble) / 128.0)).to(at::kFloat);
    KvWorkingSet source(shape, k.tokens, at::kBFloat16, cuda, 131072);
    for (int64_t l = 0; l < shape.layers; ++l) {
      const at::Tensor kv = at::randn({1, 8, k.tokens, 128}).to(at::kBFloat16).to(cuda);
      source.cache().write(l, kv, kv * 2, at::arange(k.tokens, at::kLong));
    }
    std::vector<int64_t> pos(static_cast<size_t>(k.tokens));
    for (int64_t i = 0; i < k.tokens; ++i)
      pos[static_cast<size_t>(i)] = i;
    source.cache().commit(k.tokens, {pos});
    source.appended(k.tokens);
    // Lists of different lengths: random older slots, then the last 64 in every head.
    const auto ragged = [&](int64_t tokens, int64_t kept) {
      KeepPlan plan;
      plan.slots = at::full({shape.layers, 8, kept}, -1, at::kLong);
      for (int64_t l = 0; l < shape.layers; ++l) {
        for (int64_t h = 0; h < 8; ++h) {
          const int64_t picks = kept - 64 - (l + 3 * h) % 7 * 5;
          const at::Tensor older =
              std::get<0>(at::randperm(tokens - 64, at::kLong).narrow(0, 0, picks).sort());
          plan.slots[l][h].narrow(0, kept - picks - 64, picks).copy_(older);
          plan.slots[l][h]
              .narrow(0, kept - 64, 64)
              .copy_(at::arange(tokens - 64, tokens, at::kLong));
        }
      }
      plan.slots = plan.slots.to(cuda);
      return plan;
    };
    const KeepPlan first = ragged(k.tokens, k.kept), second = ragged(k.kept, k.kept * 3 / 4);
    KvWorkingSet lists(shape, k.tokens, at::kBFloat16, cuda, 131072);
    KvWorkingSet slots(shape, k.tokens, at::kBFloat16, cuda, 131072);
    double ms[2][3] = {};  // [lists, slots][rep]
    bool same = true;
    for (int rep = 0; rep < 3; ++rep) {
      for (int which = 0; which < 2; ++which) {
        KvWorkingSet& ws = which == 0 ? lists : slots;
        ws.assign(source);
        gpu::synchronize(cuda);
        const auto t0 = std::chrono::steady_clock::now();
        ws.apply(which == 0 ? with_host_lists(first) : first, inv_freq);
        gpu::synchronize(cuda);
        ms[which][rep] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        ws.apply(which == 0 ? with_host_lists(second) : second, inv_freq);
      }
      const at::Tensor a = lists.cache().key_valid(0), b = slots.cache().key_valid(0);
      same = same && lists.tokens() == slots.tokens() &&
             at::equal(lists.slot_stream(), slots.slot_stream()) &&
             lists.exact_slot() == slots.exact_slot() &&
             lists.evicted_tokens() == slots.evicted_tokens() && a.defined() == b.defined() &&
             (!a.defined() || at::equal(a, b));
      for (int64_t l = 0; same && l < shape.layers; ++l) {
        same = at::equal(lists.cache().keys(l), slots.cache().keys(l)) &&
               at::equal(lists.cache().values(l), slots.cache().values(l));
      }
    }
    ok = ok && same;
    std::fprintf(stderr,
                 "%s plan as slots on the device equals its host lists (%s, bf16): apply %.2f / "
                 "%.2f ms as slots against %.2f / %.2f ms through host lists\n",
                 same ? "PASS" : "FAIL", k.name, ms[1][1], ms[1][2], ms[0][1], ms[0][2]);
    out.push_back({{"case", k.name},
                   {"slots_ms", {ms[1][0], ms[1][1], ms[1][2]}},
                   {"host_lists_ms", {ms[0][0], ms[0][1], ms[0][2]}},
                   {"pass", same}});
  }
  return out;
}

int main(int argc, char** argv) {
  std::string json_path, shape = "qwen2.5-7b", only;
  int64_t prefix = 4096, tokens = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    if (!std::strcmp(argv[i], "--json")) json_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--shape")) shape = argv[i + 1];
    if (!std::strcmp(argv[i], "--prefix")) prefix = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::stoll(argv[i + 1]);
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "engram-gpu-checks: no CUDA device\n");
    return 2;
  }
  bool ok = true;
  nlohmann::json out;
  out["device"] = gpu::device_info(at::Device(at::kCUDA, 0)).name;
  const auto finish = [&] {
    out["ok"] = ok;
    std::printf("%s\n", out.dump(2).c_str());
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << '\n';
    return ok ? 0 : 1;
  };
  if (only == "recorded_retrieval") {
    out["louiskv_decide"] = check_louiskv_decide(ok);
    out["louiskv_scores"] = check_louiskv_scores(ok);
    // Three times: a race between the recording and the host work around it would show as a
    // run that differs.
    for (int rep = 0; rep < 3; ++rep)
      out["recorded_retrieval"].push_back(check_recorded_retrieval(ok));
    out["joint_selection"] = check_joint_selection(ok);
    return finish();
  }
  if (only == "joint_selection") {
    out["joint_selection"] = check_joint_selection(ok);
    return finish();
  }
  if (only == "offloaded_working_set") {
    out["offloaded_working_set"] = check_offloaded_working_set(ok);
    return finish();
  }
  if (only == "units_beside_prefill") {
    out["units_beside_prefill"] = check_units_beside_prefill(ok);
    return finish();
  }
  if (only == "unit_attention_mass") {
    out["unit_attention_mass"] = check_unit_attention_mass(ok);
    return finish();
  }
  if (only == "prefill_elementwise") {
    out["prefill_elementwise"] = check_prefill_elementwise(ok);
    out["rope_angles_and_argmax"] = check_rope_angles_and_argmax(ok);
    return finish();
  }
  if (only == "decode_linear") {
    out["decode_linear"] = check_decode_linear(ok);
    out["decode_linear_fused"] = check_decode_linear_fused(ok);
    out["softmax_column_max"] = check_softmax_column_max(ok);
    return finish();
  }
  if (only == "decode_attention") {
    out["decode_attention"] = check_decode_attention(ok);
    return finish();
  }
  if (only == "patch_and_pinned") {
    out["cached_attention_max"] = check_cached_attention_max(ok);
    out["exact_pinned"] = check_exact_pinned(ok);
    return finish();
  }
  if (only == "attention_runs") {
    out["attention_runs"] = check_attention_runs(ok);
    return finish();
  }
  if (only == "ragged_prefill") {
    out["ragged_prefill"] = check_ragged_prefill(ok);
    return finish();
  }
  if (only == "slots_plan") {
    out["slots_plan"] = check_slots_plan(ok);
    return finish();
  }
  out["rope_rotate_cuda_vs_reference"] = check_rope_rotate(ok);
  out["attention_cuda_bf16_vs_cpu_f32"] = check_attention(ok);
  out["fused_kernels_cuda_vs_reference"] = check_fused_kernels(ok);
  // Newer checks: an exception is reported and the later checks run (unless a fault left the
  // CUDA context unusable).
  const auto guarded = [&](const char* key, const char* label, const auto& check) {
    try {
      out[key] = check();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAIL %s threw: %s\n", label, e.what());
      out[key] = {{"error", e.what()}};
      ok = false;
    }
  };
  guarded("louiskv_kernels", "louiskv kernels", [&] { return check_louiskv_kernels(ok); });
  guarded("louiskv_decide", "louiskv decide", [&] { return check_louiskv_decide(ok); });
  guarded("louiskv_scores", "louiskv scores", [&] { return check_louiskv_scores(ok); });
  out["pinned_host_source"] = check_pinned_source(shape, prefix, tokens, ok);
  out["paged_pool"] = check_page_pool(ok);
  out["batched_recorded_step"] = check_batched_step(ok);
  guarded("recorded_retrieval", "recorded retrieval", [&] { return check_recorded_retrieval(ok); });
  guarded("joint_selection", "joint selection", [&] { return check_joint_selection(ok); });
  guarded("offloaded_working_set", "offloaded working set",
          [&] { return check_offloaded_working_set(ok); });
  guarded("units_beside_prefill", "units beside the prefill",
          [&] { return check_units_beside_prefill(ok); });
  guarded("decode_attention", "decode attention", [&] { return check_decode_attention(ok); });
  guarded("decode_linear", "decode linear", [&] { return check_decode_linear(ok); });
  guarded("decode_linear_fused", "decode linear fused",
          [&] { return check_decode_linear_fused(ok); });
  guarded("softmax_column_max", "softmax column max", [&] { return check_softmax_column_max(ok); });
  guarded("unit_attention_mass", "unit attention mass",
          [&] { return check_unit_attention_mass(ok); });
  guarded("prefill_elementwise", "prefill elementwise",
          [&] { return check_prefill_elementwise(ok); });
  guarded("rope_angles_and_argmax", "rope angles and argmax",
          [&] { return check_rope_angles_and_argmax(ok); });
  guarded("attention_runs", "attention runs", [&] { return check_attention_runs(ok); });
  guarded("ragged_prefill", "ragged prefill", [&] { return check_ragged_prefill(ok); });
  guarded("slots_plan", "plan as slots", [&] { return check_slots_plan(ok); });
  guarded("cached_attention_max", "cached attention max",
          [&] { return check_cached_attention_max(ok); });
  guarded("exact_pinned", "exact pinned", [&] { return check_exact_pinned(ok); });
  return finish();
}
