// The recorded (replayable) decode step against the per-layer decode it replaces: same logits
// step after step on the fixtures, after the cache grows (re-recording), with positions that do
// not follow the slots, and under a sliding window. On the CPU the graph wrapper runs the step
// directly; with a CUDA device the fused kernels are also compared with their CPU references.
#include <QtTest>

#include <optional>

#include "core/engine/generation_state.h"
#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/runtime/static_decode_step.h"
#include "gpu/argmax_rows.h"
#include "gpu/decode_linear.h"
#include "gpu/device_timeline.h"
#include "gpu/rms_norm.h"
#include "gpu/rope_angles.h"
#include "gpu/rope_kv_write.h"
#include "gpu/silu_mul.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

std::vector<int64_t> prompt_ids(int64_t n, int64_t salt) {
  return test::token_ids(n, salt);
}

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

at::Tensor per_layer_step(const Decoder& decoder, KvCache& cache, int64_t token, int64_t position) {
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(decoder.device());
  ForwardRequest req;
  req.tokens = {{token}};
  req.positions = {{position}};
  return decoder.forward(req, source, timeline, nullptr).logits.view({-1});
}

struct Comparison {
  double max_error = 0;
  int64_t recordings = 0;
};

// Prefills the same prompt into two caches, then decodes `steps` greedy tokens through both
// paths; `position_gap` shifts every decode position past the slot it is written to.
Comparison compare_decode(const Decoder& decoder, int64_t prompt_len, int64_t steps,
                          int64_t static_capacity, int64_t position_gap = 0) {
  const auto prompt = prompt_ids(prompt_len, 5);
  KvCache reference(shape_of(decoder.config()), 1, prompt_len + steps, at::kFloat, at::kCPU);
  KvCache recorded(shape_of(decoder.config()), 1, static_capacity, at::kFloat, at::kCPU);
  gpu::DeviceTimeline timeline(at::kCPU);
  at::Tensor logits = prefill(decoder, reference, prompt, 0, timeline, nullptr);
  prefill(decoder, recorded, prompt, 0, timeline, nullptr);
  StaticDecodeStep fast(decoder, recorded);
  Comparison out;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t token = logits.argmax().item<int64_t>();
    const int64_t position = reference.lengths()[0] + position_gap;
    logits = per_layer_step(decoder, reference, token, position);
    const at::Tensor got = fast.step(token, position);
    out.max_error = std::max(out.max_error, (got - logits).abs().max().item<double>());
    if (fast.greedy_token() != logits.argmax().item<int64_t>()) out.max_error = 1e9;
  }
  if (recorded.lengths() != reference.lengths()) out.max_error = 1e9;
  out.recordings = fast.recordings();
  return out;
}

}  // namespace

class StaticDecodeTest : public QObject {
  Q_OBJECT

  test::FixtureModels models_;
  const Decoder& decoder(const std::string& name) { return models_.decoder(name); }

 private Q_SLOTS:
  void initTestCase() { models_.load({"qwen2-bias-tied", "llama-gqa", "qwen3-qknorm"}); }

  void staticStepMatchesPerLayerDecode_data() {
    QTest::addColumn<QString>("model");
    QTest::newRow("qwen2-bias-tied") << "qwen2-bias-tied";
    QTest::newRow("llama-gqa") << "llama-gqa";
    QTest::newRow("qwen3-qknorm") << "qwen3-qknorm";  // q/k norms inside the shared layer
  }
  // One layer implementation (core/runtime/decoder_layer.h) under both paths: 24 greedy tokens
  // agree one for one in f32, logits within 1e-5.
  void staticStepMatchesPerLayerDecode() {
    QFETCH(QString, model);
    const Comparison c = compare_decode(decoder(model.toStdString()), 9, 24, /*capacity=*/40);
    QVERIFY2(c.max_error <= 1e-5, qPrintable(QString("max |Δlogit| %1").arg(c.max_error)));
    QCOMPARE(c.recordings, int64_t{1});
  }

  void staticStepRecordsAgainWhenTheCacheGrows_data() { staticStepMatchesPerLayerDecode_data(); }
  void staticStepRecordsAgainWhenTheCacheGrows() {
    QFETCH(QString, model);
    // Capacity 10 for a 9-token prompt: the second step grows the cache (10 -> 64: growth rounds
    // to 64 slots), the 56th again (64 -> 128).
    const Comparison c = compare_decode(decoder(model.toStdString()), 9, 60, /*capacity=*/10);
    QVERIFY2(c.max_error <= 1e-5, qPrintable(QString("max |Δlogit| %1").arg(c.max_error)));
    QCOMPARE(c.recordings, int64_t{3});
  }

  // A step kept across requests (a chat session's): bound again to the same cache it replays
  // without recording; bound to another cache it records for that one and gives its logits; bound
  // back, it records again (the addresses differ from the last recording).
  void keptStepRecordsOnlyForOtherAddresses() {
    const Decoder& d = decoder("llama-gqa");
    gpu::DeviceTimeline timeline(at::kCPU);
    KvCache a(shape_of(d.config()), 1, 40, at::kFloat, at::kCPU);
    KvCache b(shape_of(d.config()), 1, 40, at::kFloat, at::kCPU);
    KvCache b_ref(shape_of(d.config()), 1, 40, at::kFloat, at::kCPU);
    prefill(d, a, prompt_ids(9, 1), 0, timeline, nullptr);
    prefill(d, b, prompt_ids(7, 2), 0, timeline, nullptr);
    prefill(d, b_ref, prompt_ids(7, 2), 0, timeline, nullptr);
    StaticDecodeStep step(d, a);
    step.step(11, a.lengths()[0]);
    step.bind(a);  // the next reply of the same session
    step.step(12, a.lengths()[0]);
    QCOMPARE(step.recordings(), int64_t{1});
    step.bind(b);
    const at::Tensor got = step.step(13, b.lengths()[0]).clone();
    QCOMPARE(step.recordings(), int64_t{2});
    const at::Tensor expected = per_layer_step(d, b_ref, 13, b_ref.lengths()[0]);
    QVERIFY((got - expected).abs().max().item<double>() <= 1e-5);
    step.bind(a);
    step.step(14, a.lengths()[0]);
    QCOMPARE(step.recordings(), int64_t{3});
  }

  // A greedy vocabulary below the model's (a tokenizer smaller than the embedding): the step's
  // argmax chooses among those ids only, as the sampler's vocab limit does; changing it records
  // the step again, and the limit past the vocabulary means all of it.
  void greedyVocabLimitsTheRecordedArgmax() {
    const Decoder& d = decoder("llama-gqa");
    gpu::DeviceTimeline timeline(at::kCPU);
    KvCache cache(shape_of(d.config()), 1, 40, at::kFloat, at::kCPU);
    prefill(d, cache, prompt_ids(9, 3), 0, timeline, nullptr);
    StaticDecodeStep step(d, cache);
    QCOMPARE(step.greedy_vocab(), d.config().vocab_size);
    const int64_t vocab = d.config().vocab_size;
    int64_t token = 11;
    bool limited_differs = false;
    for (int64_t limit : {vocab, vocab / 3, int64_t{17}, vocab + 5}) {
      step.set_greedy_vocab(limit);
      const at::Tensor logits = step.step(token, cache.lengths()[0]);
      const int64_t want = logits.narrow(0, 0, std::min(limit, vocab)).argmax().item<int64_t>();
      QCOMPARE(step.greedy_token(), want);
      limited_differs = limited_differs || want != logits.argmax().item<int64_t>();
      token = want;
    }
    QCOMPARE(step.greedy_vocab(), vocab);
    QCOMPARE(step.recordings(), int64_t{4});
    QVERIFY2(limited_differs, "some limit must exclude the unlimited argmax (the test's point)");
  }

  // Positions ahead of the slots (a cache whose keys were moved, e.g. by re-rotation) are
  // masked by position, not by slot, in both paths.
  void staticStepMasksByPosition() {
    const Comparison c = compare_decode(decoder("llama-gqa"), 7, 5, 16, /*position_gap=*/3);
    QVERIFY2(c.max_error <= 1e-5, qPrintable(QString("max |Δlogit| %1").arg(c.max_error)));
  }

  void staticStepHonoursTheSlidingWindow() {
    const Decoder& base = decoder("qwen2-bias-tied");
    ModelConfig config = base.config();
    config.sliding_window = 4;
    const Decoder windowed(config, base.weights(), base.device(), base.dtype());
    const Comparison c = compare_decode(windowed, 9, 6, 32);
    QVERIFY2(c.max_error <= 1e-5, qPrintable(QString("max |Δlogit| %1").arg(c.max_error)));
  }

  // Several rows at their own lengths and positions (OxyGen's batch): each row's logits are the
  // per-layer batched forward's, and a row that waits keeps its length (its scratch slot is
  // overwritten by its next step).
  void staticStepOverRowsMatchesPerLayerBatch() {
    const Decoder& d = decoder("llama-gqa");
    const std::vector<int64_t> lengths{5, 11, 8};
    auto rows = [&] {
      std::vector<std::unique_ptr<KvCache>> own;
      std::vector<KvRowRef> refs;
      gpu::DeviceTimeline timeline(at::kCPU);
      for (size_t r = 0; r < lengths.size(); ++r) {
        own.push_back(
            std::make_unique<KvCache>(shape_of(d.config()), 1, lengths[r], at::kFloat, at::kCPU));
        prefill(d, *own.back(), prompt_ids(lengths[r], static_cast<int64_t>(r)), 0, timeline,
                nullptr);
        refs.push_back({own.back().get(), 0});
      }
      return gather_kv_rows(refs, 16, at::kCPU);
    };
    auto recorded = rows();
    auto reference = rows();
    StaticDecodeStep fast(d, *recorded);
    std::vector<int64_t> tokens{3, 4, 5};
    double max_error = 0;
    for (int s = 0; s < 8; ++s) {
      const std::vector<bool> advance{true, s < 2 || s > 4, true};  // row 1 waits 3 steps
      const at::Tensor got = fast.step_rows(tokens, recorded->lengths(), advance);
      ForwardRequest req;
      for (size_t r = 0; r < 3; ++r) {
        req.tokens.push_back({tokens[r]});
        req.positions.push_back({reference->lengths()[r]});
      }
      const std::vector<int64_t> before = reference->lengths();
      CacheKvSource source(*reference);
      gpu::DeviceTimeline timeline(at::kCPU);
      const at::Tensor want = d.forward(req, source, timeline, nullptr).logits.select(1, 0);
      for (int64_t r = 0; r < 3; ++r) {
        if (!advance[r]) {
          reference->truncate(r, before[r]);
          continue;
        }
        max_error = std::max(max_error, (got[r] - want[r]).abs().max().item<double>());
        tokens[r] = want[r].argmax().item<int64_t>();
      }
      QCOMPARE(recorded->lengths(), reference->lengths());
    }
    QVERIFY2(max_error <= 1e-5, qPrintable(QString("max |Δlogit| %1").arg(max_error)));
    QCOMPARE(recorded->lengths()[1], int64_t{11 + 5});
    QCOMPARE(fast.recordings(), int64_t{1});
    QCOMPARE(fast.greedy_tokens().size(), size_t{3});
  }

  void staticStepRejectsTokensOutsideTheVocabulary() {
    const Decoder& d = decoder("llama-gqa");
    KvCache cache(shape_of(d.config()), 1, 8, at::kFloat, at::kCPU);
    StaticDecodeStep fast(d, cache);
    QVERIFY_EXCEPTION_THROWN(fast.step(d.config().vocab_size, 0), std::out_of_range);
    QVERIFY_EXCEPTION_THROWN(fast.step(1, d.config().max_positions), std::out_of_range);
    QCOMPARE(cache.lengths()[0], int64_t{0});
  }

  // Decode rows' projections (gpu/decode_linear.h): off CUDA exactly at::linear; on CUDA the
  // GEMV kernel within an ulp of the dtype of an f32 product of the same operands.
  void decodeLinearIsTheLinearLayer() {
    for (bool bias : {false, true}) {
      at::manual_seed(bias ? 2 : 1);
      const at::Tensor x = at::randn({3, 1, 136});
      const at::Tensor w = at::randn({40, 136});
      const at::Tensor b = bias ? at::randn({40}) : at::Tensor();
      const at::Tensor ref = bias ? at::linear(x, w, b) : at::linear(x, w);
      const at::Tensor got = gpu::decode_linear(x, w, b);
      QCOMPARE(got.sizes(), ref.sizes());
      QVERIFY(got.equal(ref));
      QVERIFY(!gpu::decode_linear_kernel_fits(x, w, b));  // CPU operands never take the kernel
#ifdef ENGRAM_WITH_CUDA
      if (!at::hasCUDA()) continue;
      const at::Tensor xd = x.to(at::kCUDA, at::kBFloat16), wd = w.to(at::kCUDA, at::kBFloat16);
      const at::Tensor bd = bias ? b.to(at::kCUDA, at::kBFloat16) : at::Tensor();
      QVERIFY(gpu::decode_linear_kernel_fits(xd, wd, bd));
      at::Tensor exact = at::matmul(xd.cpu().to(at::kFloat), wd.cpu().to(at::kFloat).t());
      if (bias) exact = exact + bd.cpu().to(at::kFloat);
      const at::Tensor kernel = gpu::decode_linear(xd, wd, bd).cpu().to(at::kFloat);
      QVERIFY(((kernel - exact).abs() - exact.abs() / 128 - 1e-3).max().item<double>() <= 0);
#endif
    }
  }

  // The folds of a decode projection (norm before, SiLU gate and residual after) give the
  // separate steps' values: off CUDA they are those steps; on CUDA the one kernel's bits equal
  // the separate kernels' (bench/gpu_checks.cpp checks more shapes).
  void decodeLinearFoldsAreTheSeparateSteps() {
    at::manual_seed(5);
    const at::Tensor x = at::randn({2, 1, 64});
    const at::Tensor w = at::randn({48, 64}) / 8;
    const at::Tensor nw = 1 + at::randn({64}) / 4;
    const at::Tensor res = at::randn({2, 1, 24});
    const gpu::DecodeLinearFusion f{
        .norm_weight = nw, .norm_eps = 1e-5, .glu_inter = 24, .residual = res};
    const auto separate = [&](const at::Tensor& xs, const gpu::DecodeLinearFusion& g) {
      return g.residual + gpu::silu_mul(gpu::decode_linear(gpu::rms_norm(xs, g.norm_weight, 1e-5),
                                                           w.to(xs.device(), xs.scalar_type()), {}),
                                        24);
    };
    const at::Tensor got = gpu::decode_linear(x, w, {}, f);
    QCOMPARE(got.sizes(), (at::IntArrayRef{2, 1, 24}));
    QVERIFY(got.equal(separate(x, f)));
    // Without the norm, and the residual alone.
    QVERIFY(gpu::decode_linear(x, w, {}, {.residual = at::randn({2, 1, 48})}).sizes() ==
            (at::IntArrayRef{2, 1, 48}));
#ifdef ENGRAM_WITH_CUDA
    if (!at::hasCUDA()) return;
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
    const gpu::DecodeLinearFusion fd{
        .norm_weight = nw.to(opts), .norm_eps = 1e-5, .glu_inter = 24, .residual = res.to(opts)};
    const at::Tensor xd = x.to(opts), wd = w.to(opts);
    QVERIFY(gpu::decode_linear_kernel_fits(xd, wd, {}, fd));
    QVERIFY(gpu::decode_linear(xd, wd, {}, fd).equal(separate(xd, fd)));
#endif
  }

  // The step's greedy argmax and RoPE angles off CUDA: at::argmax's choice (the first of equal
  // maxima, a NaN before any number) and the angles' torch expression; bad shapes are refused.
  // (The CUDA kernels are checked against these on the device: engram-gpu-checks.)
  void argmaxRowsAndRopeAnglesOnTheCpu() {
    at::Tensor logits = at::zeros({3, 5});
    logits[0][1] = 2.f;
    logits[0][3] = 2.f;
    logits[1][4] = std::numeric_limits<float>::quiet_NaN();
    logits[1][0] = 9.f;
    logits[2].fill_(-std::numeric_limits<float>::infinity());
    at::Tensor ids = at::full({3}, -1, at::kLong);
    gpu::argmax_rows(logits, ids);
    QCOMPARE(ids[0].item<int64_t>(), int64_t{1});
    QCOMPARE(ids[1].item<int64_t>(), int64_t{4});
    QCOMPARE(ids[2].item<int64_t>(), int64_t{0});
    at::Tensor wrong = at::zeros({2}, at::kLong);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gpu::argmax_rows(logits, wrong));

    const at::Tensor positions = at::tensor({0L, 7L, 131071L}, at::kLong).view({1, 3});
    const at::Tensor inv = 1.0 / at::pow(10000.0, at::arange(0, 8, 2).to(at::kFloat) / 8);
    const auto [cos, sin] = gpu::rope_angles(positions, inv, at::kBFloat16);
    QCOMPARE(cos.sizes(), (at::IntArrayRef{1, 1, 3, 8}));
    const at::Tensor angle = at::tensor({7.f}) * inv;  // position 7's angles
    QVERIFY(at::equal(sin[0][0][1], at::cat({angle.sin(), angle.sin()}).to(at::kBFloat16)));
    QVERIFY(at::equal(cos[0][0][0], at::ones({8}, at::kBFloat16)));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             gpu::rope_angles(positions.view({3}), inv, at::kFloat));
  }

  // The fused kernels against their CPU references over a grid of shapes (CUDA only).
  void fusedKernelsMatchReferences() {
#ifdef ENGRAM_WITH_CUDA
    if (!at::hasCUDA()) QSKIP("no CUDA device");
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
      for (int64_t n : {64, 128, 896, 3584, 5000}) {
        at::manual_seed(n);
        const at::Tensor x = at::randn({3, n}).to(dtype);
        const at::Tensor w = (1 + 0.1 * at::randn({n})).to(dtype);
        const at::Tensor ref = gpu::rms_norm_reference(x, w, 1e-6).to(at::kFloat);
        const at::Tensor got = gpu::rms_norm(x.cuda(), w.cuda(), 1e-6).cpu().to(at::kFloat);
        const double err = (got - ref).abs().max().item<double>();
        QVERIFY2(err <= tol, qPrintable(QString("rms_norm n=%1: %2").arg(n).arg(err)));
      }
      struct Heads {
        int64_t hq, hkv, d, capacity, slot;
      };
      for (const Heads& s : {Heads{28, 4, 128, 4352, 4100}, Heads{14, 2, 64, 17, 0}, Heads {
                               8,
                               8,
                               32,
                               5,
                               4
                             }}) {
        at::manual_seed(s.capacity);
        const at::Tensor qkv = at::randn({1, (s.hq + 2 * s.hkv) * s.d}).to(dtype);
        const at::Tensor angle = at::rand({s.d / 2}) * 3000;
        const at::Tensor cos = at::cat({angle.cos(), angle.cos()}).to(dtype);
        const at::Tensor sin = at::cat({angle.sin(), angle.sin()}).to(dtype);
        const at::Tensor slot = at::full({1}, s.slot, at::kLong);
        auto parts = [&](const at::Tensor& t) {
          return std::make_tuple(
              t.narrow(-1, 0, s.hq * s.d).view({s.hq, s.d}),
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
        for (auto [a, b] : {std::pair{q_got, q_ref}, {k_got, k_ref}, { v_got, v_ref }}) {
          err =
              std::max(err, (a.cpu().to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>());
        }
        QVERIFY2(err <= tol, qPrintable(QString("rope_kv_write hq=%1: %2").arg(s.hq).arg(err)));
      }
    }
#else
    QSKIP("built without CUDA");
#endif
  }
};

QTEST_GUILESS_MAIN(StaticDecodeTest)
#include "test_static_decode.moc"
