// engram-gpu-checks: every CUDA path against its CPU reference on the device, plus the pinned
// host KV source against the resident cache (same logits, copy intervals on the copy lane).
// Writes one JSON object; exits non-zero when a comparison exceeds its tolerance.
//   engram-gpu-checks [--json FILE] [--shape qwen2.5-7b] [--prefix 4096] [--tokens 256]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/kv_unit_pool.h"
#include "core/kv/pinned_kv_source.h"
#include "core/runtime/attention.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/page_gather.h"
#include "gpu/rms_norm.h"
#include "gpu/rope_kv_write.h"
#include "gpu/rope_rotate.h"

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

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, shape = "qwen2.5-7b";
  int64_t prefix = 4096, tokens = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
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
  out["rope_rotate_cuda_vs_reference"] = check_rope_rotate(ok);
  out["attention_cuda_bf16_vs_cpu_f32"] = check_attention(ok);
  out["fused_kernels_cuda_vs_reference"] = check_fused_kernels(ok);
  out["pinned_host_source"] = check_pinned_source(shape, prefix, tokens, ok);
  out["paged_pool"] = check_page_pool(ok);
  out["ok"] = ok;
  std::printf("%s\n", out.dump(2).c_str());
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << '\n';
  return ok ? 0 : 1;
}
