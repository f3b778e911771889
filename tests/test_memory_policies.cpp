// The memory engine (issue 14): every policy through one runner, checked against dense full
// attention. With a budget at least the history, `streaming` and `snapkv` must give full KV's
// tokens and logits bit for bit; below it, a plan applied to the working set must equal the same
// slots gathered from the full cache and re-rotated by hand (the seam and the masking, not the
// policy's quality); `snapkv` keeps exactly the top-scored keys per head; the recorded decode step
// over a refilled working set equals the per-layer path; peak KV stays <= budget + block.
#include <QtTest>

#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/working_set.h"
#include "core/policies/full_policy.h"
#include "core/policies/policy_registry.h"
#include "core/policies/snapkv_policy.h"
#include "core/policies/streaming_policy.h"
#include "core/runtime/static_decode_step.h"
#include "gpu/device_timeline.h"
#include "gpu/rope_rotate.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

std::vector<int64_t> ids(int64_t n, int64_t salt = 0) {
  return test::token_ids(n, salt);
}

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

// Greedy tokens and every step's logits under a policy.
struct Run {
  std::vector<int64_t> tokens;
  std::vector<at::Tensor> logits;
  GenerationResult result;
};

Run run_policy(const Decoder& decoder, MemoryPolicy& policy, int64_t capacity,
               const std::vector<int64_t>& prompt, int64_t new_tokens, int64_t block) {
  KvWorkingSet ws(shape_of(decoder.config()), capacity, decoder.dtype(), decoder.device(),
                  decoder.config().max_positions);
  GenerationOptions options;
  options.max_new_tokens = new_tokens;
  options.stop_at_eos = false;
  options.prefill_chunk = block;
  Run run;
  // The sampler sees the logits; greedy needs only the ids, the logits come from a probe.
  options.sampling.temperature = 0;
  run.result = generate(decoder, policy, ws, {}, prompt, options, [&](int64_t t) {
    run.tokens.push_back(t);
    return true;
  });
  return run;
}

}  // namespace

class MemoryPoliciesTest : public QObject {
  Q_OBJECT

  test::FixtureModels models_;
  const Decoder& decoder(const std::string& name) { return models_.decoder(name); }

 private Q_SLOTS:
  void initTestCase() { models_.load({"llama-gqa", "qwen2-bias-tied"}); }

  void registryKnowsThePoliciesAndRefusesOthers() {
    QCOMPARE(make_policy("full")->name(), std::string("full"));
    QCOMPARE(make_policy("streaming:sinks=8")->spec(), std::string("streaming:sinks=8"));
    QCOMPARE(make_policy("snapkv")->spec(), std::string("snapkv"));
    QVERIFY_EXCEPTION_THROWN(make_policy("h3o"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("streaming:sink=8"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("streaming:sinks=-1"), std::invalid_argument);
    QCOMPARE(std::string(default_policy_spec()), std::string("epicache"));
    // Budgets: full refuses one; a bounded policy's default and ceiling leave a block of room.
    QVERIFY_EXCEPTION_THROWN(make_policy("full", 512, 4096, 512), std::invalid_argument);
    QCOMPARE(make_policy("streaming", 0, 4096, 512)->budget(), int64_t{3584});
    std::string note;
    QCOMPARE(make_policy("snapkv", 9000, 4096, 512, &note)->budget(), int64_t{3584});
    QVERIFY(note.find("lowered") != std::string::npos);
    QCOMPARE(make_policy("streaming", 1024, 4096, 512)->budget(), int64_t{1024});
  }

  // A budget that holds everything: no plan is ever made, so tokens and logits are full KV's.
  void boundedPoliciesAboveTheHistoryEqualFull_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("policy");
    for (const char* m : {"llama-gqa", "qwen2-bias-tied"})
      for (const char* p : {"streaming", "snapkv"})
        QTest::newRow((std::string(m) + "/" + p).c_str()) << m << p;
  }
  void boundedPoliciesAboveTheHistoryEqualFull() {
    QFETCH(QString, model);
    QFETCH(QString, policy);
    const Decoder& d = decoder(model.toStdString());
    const auto prompt = ids(70);
    FullPolicy full;
    const Run reference = run_policy(d, full, 0, prompt, 12, 16);
    auto bounded = make_policy(policy.toStdString(), 200, d.config().max_positions, 16);
    const Run got = run_policy(d, *bounded, 200 + 16, prompt, 12, 16);
    QCOMPARE(got.tokens, reference.tokens);
    QCOMPARE(got.result.evicted_tokens, int64_t{0});
    QCOMPARE(got.result.peak_kv_tokens, reference.result.peak_kv_tokens);
  }

  void streamingPlanKeepsSinksAndTheMostRecent() {
    StreamingPolicy p(4);
    WorkingSetInfo ws;
    ws.tokens = 20;
    ws.layers = 2;
    ws.kv_heads = 2;
    const KeepPlan plan = *p.shrink(ws, 10);
    QCOMPARE(plan.shared, (std::vector<int64_t>{0, 1, 2, 3, 14, 15, 16, 17, 18, 19}));
    QVERIFY(plan.per_head.empty());
    // A budget below the sinks keeps the first tokens only.
    QCOMPARE(p.shrink(ws, 3)->shared, (std::vector<int64_t>{0, 1, 2}));
  }

  // SnapKV's choice, recomputed here with plain loops: mean over the window's rows and the
  // group's query heads, max-pooled over 7 neighbours, top-k per KV head, plus the window.
  void snapKvKeepsTheTopScoredKeysPerHead() {
    const int64_t hq = 4, hkv = 2, rows = 3, t = 24, target = 10, kernel = 7;
    SnapKvPolicy p(rows, kernel);
    at::manual_seed(3);
    const at::Tensor probs = at::softmax(at::randn({1, hq, rows, t}), -1);
    LayerView view;
    view.layer = 0;
    view.k = at::zeros({1, hkv, 1, 8});
    view.probs = probs;
    p.on_layer(view);
    WorkingSetInfo ws;
    ws.tokens = t;
    ws.layers = 1;
    ws.kv_heads = hkv;
    const KeepPlan plan = *p.shrink(ws, target);
    QCOMPARE(static_cast<int64_t>(plan.per_head.size()), int64_t{1});
    const auto acc = probs.accessor<float, 4>();
    for (int64_t h = 0; h < hkv; ++h) {
      std::vector<double> mean(t, 0.0), pooled(t, 0.0);
      for (int64_t g = 0; g < hq / hkv; ++g)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = 0; k < t; ++k)
            mean[k] += acc[0][h * (hq / hkv) + g][r][k] / double(rows * hq / hkv);
      for (int64_t k = 0; k < t; ++k) {
        pooled[k] = -1;
        for (int64_t j = std::max<int64_t>(0, k - kernel / 2);
             j <= std::min<int64_t>(t - 1, k + kernel / 2); ++j)
          pooled[k] = std::max(pooled[k], mean[j]);
      }
      std::vector<int64_t> order(t - rows);
      for (int64_t k = 0; k < t - rows; ++k)
        order[k] = k;
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return pooled[a] > pooled[b]; });
      std::vector<int64_t> want(order.begin(), order.begin() + (target - rows));
      // Ties between pooled neighbours may pick either: compare scores, not ids.
      std::vector<double> got_scores, want_scores;
      std::vector<int64_t> got(plan.per_head[0][h].begin(),
                               plan.per_head[0][h].begin() + (target - rows));
      for (int64_t k : got)
        got_scores.push_back(pooled[k]);
      for (int64_t k : want)
        want_scores.push_back(pooled[k]);
      std::sort(got_scores.begin(), got_scores.end());
      std::sort(want_scores.begin(), want_scores.end());
      for (size_t i = 0; i < got_scores.size(); ++i)
        QVERIFY(std::abs(got_scores[i] - want_scores[i]) < 1e-6);
      QVERIFY(std::is_sorted(got.begin(), got.end()));
      // The window is kept whole, at the end.
      for (int64_t r = 0; r < rows; ++r)
        QCOMPARE(plan.per_head[0][h][target - rows + r], t - rows + r);
    }
  }

  // The plan applied by the runner equals the kept slots of the full cache re-rotated to
  // 0..n-1 by hand, per (layer, head), and the next token's logits over it equal a forward over
  // that hand-made cache (metamorphic: any policy's output through the seam is dense attention
  // over exactly the tokens it reports as kept).
  void appliedPlanEqualsGatherAndRerotateByHand_data() {
    QTest::addColumn<QString>("policy_spec");
    QTest::newRow("streaming") << "streaming";
    QTest::newRow("snapkv") << "snapkv:window=8";
  }
  void appliedPlanEqualsGatherAndRerotateByHand() {
    QFETCH(QString, policy_spec);
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const auto prompt = ids(61, 2);
    const int64_t budget = 32, block = 16;
    // The full cache of the same tokens, block by block (as the runner computes them) is only
    // equal while nothing was evicted; so compare one plan applied after a single prefill.
    KvCache full(shape_of(c), 1, 64, at::kFloat, at::kCPU);
    gpu::DeviceTimeline timeline(at::kCPU);
    prefill(d, full, prompt, 0, timeline, nullptr);
    auto policy = make_policy(policy_spec.toStdString(), budget, c.max_positions, block);
    KvWorkingSet ws(shape_of(c), 96, at::kFloat, at::kCPU, c.max_positions);
    // One forward of the whole prompt with the policy's probes, then one plan.
    {
      BlockInfo info;
      info.fresh_tokens = 61;
      info.will_evict = true;
      ForwardRequest req;
      req.tokens = {prompt};
      req.positions = {std::vector<int64_t>(61)};
      for (int64_t i = 0; i < 61; ++i)
        req.positions[0][i] = i;
      req.probe_rows = policy->probe_rows(info);
      MemoryPolicy* pol = policy.get();
      req.on_layer = [pol](const LayerView& v) { pol->on_layer(v); };
      CacheKvSource source(ws.cache());
      d.forward(req, source, timeline, nullptr);
      ws.appended(61);
    }
    const KeepPlan plan = *policy->shrink(ws.info(), budget);
    ws.apply(plan, d.rope().inverse_frequencies());
    QCOMPARE(ws.tokens(), budget);
    QVERIFY(ws.exact_stream() <= 61);
    const at::Tensor map = ws.slot_stream();  // [L, H, budget]
    // By hand: gather each (layer, head)'s kept tokens from the full cache, rotate to j.
    KvCache manual(shape_of(c), 1, 64, at::kFloat, at::kCPU);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      at::Tensor k = at::empty({1, c.num_kv_heads, budget, c.head_dim});
      at::Tensor v = at::empty({1, c.num_kv_heads, budget, c.head_dim});
      for (int64_t h = 0; h < c.num_kv_heads; ++h) {
        for (int64_t j = 0; j < budget; ++j) {
          const int64_t src = map[l][h][j].item<int64_t>();
          at::Tensor key = full.keys(l)[0][h].narrow(0, src, 1).clone();  // [1, d]
          at::Tensor delta = at::full({1}, j - src, at::kLong);
          gpu::rope_rotate_(key, delta, d.rope().inverse_frequencies());
          k[0][h][j].copy_(key[0]);
          v[0][h][j].copy_(full.values(l)[0][h][src]);
        }
      }
      QVERIFY((ws.cache().keys(l)[0] - k[0]).abs().max().item<double>() < 1e-5);
      QVERIFY((ws.cache().values(l)[0] - v[0]).abs().max().item<double>() == 0);
      manual.write(l, k, v, at::arange(budget, at::kLong).view({1, budget}));
    }
    manual.commit(budget, {[&] {
                    std::vector<int64_t> p(budget);
                    for (int64_t j = 0; j < budget; ++j)
                      p[j] = j;
                    return p;
                  }()});
    // The next token over both.
    ForwardRequest next;
    next.tokens = {{42}};
    next.positions = {{budget}};
    CacheKvSource a(ws.cache()), b(manual);
    const at::Tensor la = d.forward(next, a, timeline, nullptr).logits;
    const at::Tensor lb = d.forward(next, b, timeline, nullptr).logits;
    QVERIFY2((la - lb).abs().max().item<double>() < 1e-4,
             qPrintable(QString::number((la - lb).abs().max().item<double>())));
  }

  // Peak KV per layer never passes budget + block, however long the prompt; the positions stay
  // inside the model's, and the stream counts every token.
  void blockPrefillStaysUnderBudgetPlusBlock_data() {
    appliedPlanEqualsGatherAndRerotateByHand_data();
  }
  void blockPrefillStaysUnderBudgetPlusBlock() {
    QFETCH(QString, policy_spec);
    const Decoder& d = decoder("qwen2-bias-tied");
    const int64_t budget = 48, block = 16;
    auto policy = make_policy(policy_spec.toStdString(), budget, d.config().max_positions, block);
    const auto prompt = ids(d.config().max_positions + 300, 4);  // past the model's positions
    const Run r = run_policy(d, *policy, budget + block, prompt, 40, block);
    QCOMPARE(static_cast<int64_t>(r.tokens.size()), int64_t{40});
    QVERIFY(r.result.peak_kv_tokens <= budget + block);
    QVERIFY(r.result.evicted_tokens >= static_cast<int64_t>(prompt.size()) + 40 - budget - block);
  }

  // Full KV still stops at the model's positions, and the message names the way out.
  void fullRefusesPastThePositions() {
    const Decoder& d = decoder("qwen2-bias-tied");
    FullPolicy full;
    bool thrown = false;
    try {
      run_policy(d, full, 0, ids(d.config().max_positions + 5), 4, 64);
    } catch (const std::out_of_range& e) {
      thrown = true;
      QVERIFY2(std::string(e.what()).find("--policy streaming") != std::string::npos, e.what());
    }
    QVERIFY(thrown);
  }

  // The recorded decode step reads the working set's fixed slots: after a plan refilled them it
  // equals the per-layer path step after step, across further plans.
  void recordedStepOverARefilledWorkingSetEqualsPerLayer() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const int64_t budget = 24, block = 8;
    auto pa = make_policy("streaming", budget, c.max_positions, block);
    auto pb = make_policy("streaming", budget, c.max_positions, block);
    KvWorkingSet a(shape_of(c), budget + block, at::kFloat, at::kCPU, c.max_positions);
    KvWorkingSet b(shape_of(c), budget + block, at::kFloat, at::kCPU, c.max_positions);
    gpu::DeviceTimeline timeline(at::kCPU);
    const auto prompt = ids(50, 9);
    at::Tensor la = prefill(d, *pa, a, prompt, block, timeline, nullptr);
    prefill(d, *pb, b, prompt, block, timeline, nullptr);
    StaticDecodeStep fast(d, b.cache());
    double worst = 0;
    for (int step = 0; step < 30; ++step) {
      const int64_t token = la.argmax().item<int64_t>();
      for (auto* pair : {&a, &b}) {
        MemoryPolicy& p = pair == &a ? *pa : *pb;
        if (auto plan = p.before_decode_step(pair->info()))
          pair->apply(*plan, d.rope().inverse_frequencies());
      }
      CacheKvSource source(a.cache());
      ForwardRequest req;
      req.tokens = {{token}};
      req.positions = {{a.next_position()}};
      la = d.forward(req, source, timeline, nullptr).logits.view({-1});
      a.appended(1);
      const at::Tensor lb = fast.step(token, b.next_position());
      b.appended(1);
      worst = std::max(worst, (la - lb).abs().max().item<double>());
      QCOMPARE(fast.greedy_token(), la.argmax().item<int64_t>());
    }
    QVERIFY2(worst <= 1e-5, qPrintable(QString::number(worst)));
    QVERIFY(a.evicted_tokens() > 0);
    QCOMPARE(fast.recordings(), int64_t{1});  // the working set never moved
  }

  // An evaluation forks the history's working set per question: assign() copies it whatever
  // the target held before, growing or fixed.
  void assignCopiesAnotherWorkingSet() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    gpu::DeviceTimeline timeline(at::kCPU);
    FullPolicy full;
    for (const int64_t capacity : {int64_t{0}, int64_t{64}}) {
      KvWorkingSet a(shape_of(c), capacity, at::kFloat, at::kCPU, c.max_positions);
      KvWorkingSet b(shape_of(c), capacity, at::kFloat, at::kCPU, c.max_positions);
      prefill(d, full, a, ids(30, 1), 8, timeline, nullptr);
      prefill(d, full, b, ids(50, 2), 8, timeline, nullptr);
      b.assign(a);
      QCOMPARE(b.tokens(), int64_t{30});
      QCOMPARE(b.stream_tokens(), int64_t{30});
      for (int64_t l = 0; l < c.num_layers; ++l)
        QVERIFY((a.cache().keys(l) - b.cache().keys(l)).abs().max().item<double>() == 0);
      const at::Tensor la = prefill(d, full, a, {7}, 8, timeline, nullptr);
      const at::Tensor lb = prefill(d, full, b, {7}, 8, timeline, nullptr);
      QVERIFY((la - lb).abs().max().item<double>() == 0);
    }
  }

  // Truncation: exact back to the stream's verbatim tail, refused inside compacted KV.
  void truncateIsExactOnlyAfterTheCompactedPart() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    auto policy = make_policy("streaming", 32, c.max_positions, 8);
    KvWorkingSet ws(shape_of(c), 40, at::kFloat, at::kCPU, c.max_positions);
    gpu::DeviceTimeline timeline(at::kCPU);
    prefill(d, *policy, ws, ids(60, 1), 8, timeline, nullptr);
    QCOMPARE(ws.stream_tokens(), int64_t{60});
    QVERIFY(ws.exact_stream() > 0 && ws.exact_stream() < 60);
    QVERIFY(!ws.truncate(ws.exact_stream() - 1));
    QCOMPARE(ws.stream_tokens(), int64_t{60});
    const int64_t slots = ws.tokens();
    QVERIFY(ws.truncate(58));
    QCOMPARE(ws.tokens(), slots - 2);
  }
};

QTEST_GUILESS_MAIN(MemoryPoliciesTest)
#include "test_memory_policies.moc"
