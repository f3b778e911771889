// Decode-time retrieval (issue 17) against dense full attention. A budget that covers the pool
// with a retrieval at every step must give full attention's logits (the runner loses, moves or
// mis-positions no token, whatever the window offloads); below it the parts are checked one by
// one: k-means recovers planted clusters, units are contiguous per cluster, the boundary rule,
// Quest's bound, temporal segments split where the layer retrieved, and a prefill policy
// composed with retrieval keeps the conversation exact in the working set.
#include <QtTest>

#include "core/engine/generator.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/retrieval_kv_source.h"
#include "core/kv/working_set.h"
#include "core/policies/h2o_policy.h"
#include "core/policies/louiskv_policy.h"
#include "core/policies/page_retrieval_policy.h"
#include "core/policies/policy_registry.h"
#include "core/policies/retrieving_policy.h"
#include "core/runtime/static_decode_step.h"
#include "gpu/device_timeline.h"
#include "support/collected_intervals.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

// Logits of `tokens` fed one by one after `prompt`, attention served by `make_source(cache)` (or
// by the cache itself when it returns null). The source lives in `keep`, for the caller to read.
using SourceFactory = std::function<std::unique_ptr<RetrievalKvSource>(KvCache&)>;
std::vector<at::Tensor> teacher_forced(const Decoder& decoder, const std::vector<int64_t>& prompt,
                                       const std::vector<int64_t>& tokens,
                                       const SourceFactory& make_source,
                                       std::unique_ptr<RetrievalKvSource>* keep = nullptr) {
  const ModelConfig& c = decoder.config();
  KvCache cache(shape_of(c), 1, static_cast<int64_t>(prompt.size() + tokens.size()),
                decoder.dtype(), decoder.device());
  gpu::DeviceTimeline timeline(decoder.device());
  (void)prefill(decoder, cache, prompt, 0, timeline, nullptr);
  std::unique_ptr<RetrievalKvSource> source = make_source(cache);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ForwardRequest req;
    req.phase = ForwardPhase::kDecode;
    req.tokens = {{tokens[i]}};
    req.positions = {{static_cast<int64_t>(prompt.size() + i)}};
    CacheKvSource plain(cache);
    KvSource& s = source ? *source : static_cast<KvSource&>(plain);
    out.push_back(decoder.forward(req, s, timeline, nullptr).logits.view({-1}));
  }
  if (keep) *keep = std::move(source);
  return out;
}

double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

RetrievalSettings settings(int64_t sinks, int64_t window, int64_t budget, int64_t full_layers) {
  RetrievalSettings s;
  s.sinks = sinks;
  s.window = window;
  s.budget = budget;
  s.full_layers = full_layers;
  return s;
}

LouisKvOptions every_step() {
  LouisKvOptions o;
  o.stride = 1;
  return o;
}

// Greedy decoding of exactly `tokens` tokens (no stop at EOS).
GenerationOptions greedy(int64_t tokens) {
  GenerationOptions options;
  options.max_new_tokens = tokens;
  options.stop_at_eos = false;
  options.sampling.temperature = 0;
  return options;
}

// The source that served 24 teacher-forced decode tokens after a 40-token prompt on llama-gqa
// (the temporal-segment tests: layer 1 retrieves, layer 0 keeps every token); `map_request` >= 0
// records its retrieval map.
std::unique_ptr<RetrievalKvSource> served_24_tokens(const Decoder& decoder, RetrievalPolicy& policy,
                                                    int64_t map_request = -1) {
  std::unique_ptr<RetrievalKvSource> seen;
  (void)teacher_forced(
      decoder, test::token_ids(40, 5), test::token_ids(24, 6),
      [&](KvCache& cache) {
        auto made = std::make_unique<RetrievalKvSource>(policy, cache, 24, nullptr);
        if (map_request >= 0) made->record_map(map_request);
        return made;
      },
      &seen);
  return seen;
}

}  // namespace

class LouisKvTest : public QObject {
  Q_OBJECT

  test::FixtureModels models_;

 private Q_SLOTS:
  void initTestCase() { models_.load({"llama-gqa", "qwen2-bias-tied"}); }

  void kmeansRecoversPlantedClusters() {
    // Three directions per head, one per stretch of text (the k-means starts from keys spread
    // evenly over the prompt, so each stretch gets a centroid), with noisy keys and a few strays
    // of each direction planted in the other stretches.
    at::manual_seed(3);
    const int64_t heads = 2, per = 20, d = 8;
    at::Tensor dirs = at::randn({heads, 3, d});
    at::Tensor truth = at::arange(3 * per, at::kLong).div(per, "floor");
    truth[5] = 2;
    truth[27] = 0;
    truth[44] = 1;
    at::Tensor keys = dirs.index_select(1, truth) * 5 + 0.3 * at::randn({heads, 3 * per, d});
    const auto [assignment, centroids] = cluster_keys(keys, 3, 20);
    QCOMPARE(centroids.sizes(), (at::IntArrayRef{heads, 3, d}));
    for (int64_t h = 0; h < heads; ++h) {
      // Same partition as the truth, whatever the cluster numbers.
      const at::Tensor a = assignment.select(0, h);
      for (int64_t i = 0; i < 3 * per; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          QCOMPARE(a[i].item<int64_t>() == a[j].item<int64_t>(),
                   truth[i].item<int64_t>() == truth[j].item<int64_t>());
        }
      }
    }
  }

  // `moved=P`: the clustering stops once a round moves at most P keys per thousand.
  void kmeansStopsWhenFewKeysMove() {
    at::manual_seed(5);
    const at::Tensor keys = at::randn({2, 400, 8});  // no structure: many rounds to settle
    int64_t exact = 0, loose = 0, any = 0;
    const at::Tensor settled = cluster_keys(keys, 25, 50, 0, &exact).first;
    const at::Tensor nearly = cluster_keys(keys, 25, 50, 50, &loose).first;
    (void)cluster_keys(keys, 25, 50, 1000, &any);
    QCOMPARE(any, int64_t{1});
    QVERIFY(loose >= 1 && loose < exact);
    QVERIFY(exact <= 50);
    // Stopped early, the assignment is still close to the settled one.
    const double differ = settled.ne(nearly).to(at::kDouble).mean().item<double>();
    QVERIFY2(differ < 0.25, qPrintable(QString::number(differ)));
    QVERIFY(make_policy("louiskv:moved=0")->spec().find("moved=0") != std::string::npos);
    QVERIFY(make_policy("louiskv")->spec().find("moved") == std::string::npos);  // the default
  }

  void unitsAreContiguousClustersWithTheirMeanKey() {
    at::Tensor keys = at::arange(2 * 6 * 2, at::kFloat).view({2, 6, 2});
    at::Tensor assignment =
        at::tensor({1, 0, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0}, at::kLong).view({2, 6});
    const PromptUnits u = units_from_assignment(keys, assignment, 3);
    QVERIFY(u.order.select(0, 0).equal(at::tensor({1, 4, 0, 2, 5, 3}, at::kLong)));
    QVERIFY(u.sizes.select(0, 0).equal(at::tensor({2, 3, 1}, at::kLong)));
    QVERIFY(u.offsets.select(0, 0).equal(at::tensor({0, 2, 5}, at::kLong)));
    QVERIFY(u.sizes.select(0, 1).equal(at::tensor({6, 0, 0}, at::kLong)));
    // Head 0, cluster 1 = tokens 0, 2, 5: mean of their keys.
    const at::Tensor expect = (keys[0][0] + keys[0][2] + keys[0][5]) / 3;
    QVERIFY(at::allclose(u.index[0][1], expect));
    QVERIFY(u.index[1][2].abs().sum().item<float>() == 0.0f);  // empty cluster
  }

  // A ragged layer's units (EpiCache per_head=2 sets): each head's cover exactly its visible
  // keys, first in its order, its hidden ones after in no unit, and what a hidden key holds
  // changes nothing; LouisKV in one masked k-means (each unit indexed by its members' mean key),
  // Quest head by head (the default). Head 3 sees no key at all.
  void raggedUnitsHoldEachHeadsVisibleKeys() {
    at::manual_seed(5);
    const int64_t heads = 4, n = 300, d = 16;
    const at::Tensor keys = at::randn({heads, n, d});
    const at::Tensor visible =
        at::rand({heads, n}).gt(at::tensor({0.1, 0.4, 0.7, 1.5}).view({-1, 1}));
    const at::Tensor poisoned = keys.masked_fill(visible.logical_not().unsqueeze(-1), 40.0);
    const int64_t most = visible.sum(1).max().item<int64_t>();
    for (int kind = 0; kind < 2; ++kind) {
      std::unique_ptr<RetrievalPolicy> policy;
      if (kind == 0)
        policy = std::make_unique<LouisKvPolicy>(LouisKvOptions{}, settings(4, 8, 64, 0));
      else
        policy = std::make_unique<PageRetrievalPolicy>(16, settings(4, 8, 64, 0));
      const PromptUnits u = policy->ragged_prompt_units(1, keys, visible);
      const PromptUnits p = policy->ragged_prompt_units(1, poisoned, visible);
      QVERIFY(u.order.equal(p.order));
      QVERIFY(u.sizes.equal(p.sizes));
      QVERIFY(u.offsets.equal(p.offsets));
      QVERIFY(u.index.equal(p.index));
      QCOMPARE(u.sizes.size(1), (most + 15) / 16);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t seen = visible[h].sum().item<int64_t>();
        QCOMPARE(u.sizes[h].sum().item<int64_t>(), seen);
        QVERIFY(std::get<0>(u.order[h].sort()).equal(at::arange(n)));
        QVERIFY(visible[h].index_select(0, u.order[h].narrow(0, 0, seen)).all().item<bool>());
        QVERIFY((u.offsets[h] + u.sizes[h]).le(seen).all().item<bool>());
        for (int64_t k = 0; kind == 0 && k < u.sizes.size(1); ++k) {
          const int64_t size = u.sizes[h][k].item<int64_t>();
          if (size == 0) continue;
          const at::Tensor members = u.order[h].narrow(0, u.offsets[h][k].item<int64_t>(), size);
          const double diff =
              (keys[h].index_select(0, members).mean(0) - u.index[h][k]).abs().max().item<double>();
          QVERIFY2(diff < 1e-5, qPrintable(QString("head %1 unit %2: %3").arg(h).arg(k).arg(diff)));
        }
      }
      if (kind == 0) QVERIFY(u.kmeans_rounds >= 1);
    }
  }

  void boundaryRuleAndStride() {
    LouisKvOptions o;
    o.tau = 0.7;
    LouisKvPolicy policy(o, settings(4, 8, 16, 0));
    policy.begin_decode(1, 100, 10);
    const at::Tensor a = at::tensor({1.0f, 0.0f, 1.0f, 0.0f}).view({2, 2});
    const at::Tensor near = at::tensor({1.0f, 0.1f, 1.0f, 0.1f}).view({2, 2});
    const at::Tensor turn = at::tensor({0.0f, 1.0f, 0.0f, 1.0f}).view({2, 2});
    QVERIFY(policy.retrieve(0, 0, a));      // the first step always retrieves
    QVERIFY(!policy.retrieve(0, 1, near));  // r ~ 0.995 >= τ
    QVERIFY(policy.retrieve(0, 2, turn));   // r ~ 0.1 < τ
    QCOMPARE(policy.similarities()[0].size(), size_t{2});
    QVERIFY(std::abs(policy.similarities()[0][1] - 0.0995f) < 1e-3f);
    o.stride = 3;
    LouisKvPolicy fixed(o, settings(4, 8, 16, 0));
    fixed.begin_decode(1, 100, 10);
    std::vector<bool> fired;
    for (int64_t step = 0; step < 7; ++step)
      fired.push_back(fixed.retrieve(0, step, step % 2 ? a : turn));
    QCOMPARE(fired, (std::vector<bool>{true, false, false, true, false, false, true}));
  }

  // Without `tau=` each request gets the paper's τ for its shape: 0.85 for a long input (a prompt
  // of at least 4x the reply's room), 0.7 for a long output or both long; the rule uses it.
  void tauFollowsTheRequestsShape() {
    const auto by_shape = make_policy("louiskv:full_layers=0");
    auto& p = dynamic_cast<LouisKvPolicy&>(*by_shape->decode_retrieval());
    QVERIFY(p.options().tau_by_shape);
    const auto tau_of = [&](int64_t prompt, int64_t max_new) {
      p.begin_decode(1, prompt, max_new);
      return p.boundary_threshold() == p.tau() ? p.tau() : -1.0;  // the map's τ is the rule's
    };
    QCOMPARE(tau_of(32768, 512), 0.85);  // long input
    QCOMPARE(tau_of(2048, 512), 0.85);   // exactly 4x
    QCOMPARE(tau_of(2047, 512), 0.7);
    QCOMPARE(tau_of(500, 16384), 0.7);    // long output
    QCOMPARE(tau_of(32768, 16384), 0.7);  // both long
    // r ~ 0.78 between these two queries: a boundary under 0.85, none under 0.7.
    const at::Tensor a = at::tensor({1.0f, 0.0f, 1.0f, 0.0f}).view({2, 2});
    const at::Tensor b = at::tensor({1.0f, 0.8f, 1.0f, 0.8f}).view({2, 2});
    p.begin_decode(1, 32768, 512);
    QVERIFY(p.retrieve(0, 0, a));
    QVERIFY(p.retrieve(0, 1, b));
    p.begin_decode(1, 500, 16384);
    QVERIFY(p.retrieve(0, 0, a));
    QVERIFY(!p.retrieve(0, 1, b));
    // A given τ stays whatever the shape.
    const auto fixed = make_policy("louiskv:tau=50");
    auto& f = dynamic_cast<LouisKvPolicy&>(*fixed->decode_retrieval());
    f.begin_decode(1, 32768, 512);
    QCOMPARE(f.tau(), 0.5);
  }

  // `rate=P`: each layer's τ tracks its own r_t so that it retrieves at ~P % of the steps, whether
  // its queries turn at every token (layer 0 here: r_t ~ 0) or hardly ever (layer 1: r_t ~ 0.99),
  // where one τ = 0.7 retrieves at every step of the first and at none of the second. The tracker
  // moves τ by +gain·P a step without retrieval and by gain·(P - 1) a step with one, so over N
  // compared steps the retrievals are P·N - (τ_N - τ_0) / gain exactly (in f32 rounding).
  void eachLayerHoldsItsRate() {
    at::manual_seed(21);
    const int64_t steps = 600;
    const at::Tensor base = at::randn({4, 32});
    std::vector<at::Tensor> turning, settled;
    for (int64_t t = 0; t < steps; ++t) {
      turning.push_back(at::randn({4, 32}));
      settled.push_back(base + 0.05 * at::randn({4, 32}));
    }
    const auto run = [&](int64_t rate, std::vector<double>* end_tau) {
      LouisKvOptions o;
      o.tau = 0.7;
      o.rate_percent = rate;
      LouisKvPolicy p(o, settings(4, 8, 16, 0));
      p.begin_decode(2, 100, steps);
      const auto next_request = [&] {
        // What a layer learned carries over to the policy's next request (a chat's next turn).
        const double learned = p.layer_tau(0);
        p.begin_decode(2, 100, steps);
        QCOMPARE(p.layer_tau(0), learned);
      };
      std::vector<int64_t> fired(4, 0);  // each layer's retrievals, then those of the second half
      for (int64_t t = 0; t < steps; ++t) {
        const bool a = p.retrieve(0, t, turning[static_cast<size_t>(t)]);
        const bool b = p.retrieve(1, t, settled[static_cast<size_t>(t)]);
        fired[0] += a;
        fired[1] += b;
        fired[2] += a && t >= steps / 2;
        fired[3] += b && t >= steps / 2;
      }
      if (end_tau) *end_tau = {p.layer_tau(0), p.layer_tau(1)};
      next_request();
      return fired;
    };
    const auto one_tau = run(0, nullptr);
    QCOMPARE(one_tau[0], steps);  // r_t ~ 0 < 0.7 at every step
    QCOMPARE(one_tau[1], 1);      // only the first step
    std::vector<double> tau;
    const auto own = run(25, &tau);
    const double gain = LouisKvOptions::kRateGain;
    for (int layer = 0; layer < 2; ++layer) {
      // Step 0 always retrieves and does not move τ; steps 1..N-1 are compared.
      const double compared = double(steps - 1);
      const double expect = 0.25 * compared - (tau[layer] - 0.7) / gain;
      QVERIFY2(std::abs(double(own[layer] - 1) - expect) < 0.05,
               ("layer " + std::to_string(layer) + ": " + std::to_string(own[layer]) + " vs " +
                std::to_string(expect))
                   .c_str());
      // Once settled (the second half), each layer retrieves at about the rate.
      const double share = double(own[layer + 2]) / double(steps / 2);
      QVERIFY2(share > 0.2 && share < 0.3, std::to_string(share).c_str());
    }
    QVERIFY(tau[0] < 0.3);   // moved down to the turning layer's r_t
    QVERIFY(tau[1] > 0.95);  // and up to the settled one's
    // The map has no single τ to draw against.
    LouisKvOptions o;
    o.rate_percent = 25;
    LouisKvPolicy p(o, settings(4, 8, 16, 0));
    QCOMPARE(p.boundary_threshold(), -1.0);
    // A clone moves its own τ, not the original's (the kernel updates it in place).
    p.begin_decode(1, 100, steps);
    for (int64_t t = 0; t < 5; ++t)
      (void)p.retrieve(0, t, turning[static_cast<size_t>(t)]);
    const double before = p.layer_tau(0);
    const auto copy = p.clone();
    copy->begin_decode(1, 100, steps);
    for (int64_t t = 0; t < 5; ++t)
      (void)copy->retrieve(0, t, turning[static_cast<size_t>(t)]);
    QVERIFY(static_cast<LouisKvPolicy&>(*copy).layer_tau(0) < before);
    QCOMPARE(p.layer_tau(0), before);
  }

  void groupScoresAverageSoftmaxOverTheGroup() {
    LouisKvPolicy policy(LouisKvOptions{}, settings(4, 8, 16, 0));
    at::manual_seed(5);
    const at::Tensor q = at::randn({4, 8});         // 2 KV heads x 2 query heads
    const at::Tensor index = at::randn({2, 5, 8});  // 5 units
    const at::Tensor s = policy.score(q, index);
    for (int64_t h = 0; h < 2; ++h) {
      at::Tensor expect = at::zeros({5});
      for (int64_t j = 0; j < 2; ++j)
        expect += (at::mv(index[h], q[2 * h + j]) / std::sqrt(8.0)).softmax(0) / 2;
      QVERIFY(at::allclose(s[h], expect, 1e-5, 1e-6));
    }
  }

  // Scores do not depend on what their memory held before: libtorch 1.13's CPU baddbmm at beta 0
  // reads its uninitialised result, and a NaN there made whole heads' scores NaN (the selection
  // then followed the allocation). Memory full of NaN is freed just before each scoring.
  void scoresIgnoreWhatTheirMemoryHeldBefore() {
    LouisKvPolicy policy(LouisKvOptions{}, settings(4, 8, 16, 0));
    at::manual_seed(6);
    const at::Tensor q = at::randn({4, 16});
    const at::Tensor index = at::randn({2, 12, 16});
    const at::Tensor clean = policy.score(q, index);
    QVERIFY(!clean.isnan().any().item<bool>());
    for (int rep = 0; rep < 20; ++rep) {
      {
        std::vector<at::Tensor> poison;
        for (int i = 0; i < 64; ++i)
          poison.push_back(at::full({2, 2, 12}, std::nan(""), index.options()));
      }
      QVERIFY(policy.score(q, index).equal(clean));
    }
  }

  void questBoundIsAnUpperBound() {
    PageRetrievalPolicy quest(16, settings(4, 16, 16, 0));
    at::manual_seed(9);
    const at::Tensor keys = at::randn({1, 40, 8});
    const PromptUnits pages = quest.prompt_units(0, keys);
    QVERIFY(pages.sizes.select(0, 0).equal(at::tensor({16, 16, 8}, at::kLong)));
    for (int trial = 0; trial < 20; ++trial) {
      const at::Tensor q = at::randn({1, 8});
      const at::Tensor bound = quest.score(q, pages.index).select(0, 0);
      for (int64_t p = 0; p < 3; ++p) {
        const at::Tensor page = keys[0].narrow(0, p * 16, pages.sizes[0][p].item<int64_t>());
        const float best = at::mv(page, q[0]).max().item<float>();
        QVERIFY(bound[p].item<float>() >= best - 1e-5f);
      }
    }
  }

  // A bf16 model's unit index kept in f32 was ~45 % of attention's device bytes (8B shape, 32K
  // prompt); in the keys' dtype every part of the device region scales with the element size.
  void indexIsKeptInTheKeysDtype() {
    int64_t device_bytes[2] = {};
    for (int i = 0; i < 2; ++i) {
      const at::ScalarType dtype = i == 0 ? at::kFloat : at::kBFloat16;
      KvCache cache(KvCacheShape{3, 2, 16}, 1, 300, dtype, at::kCPU);
      at::manual_seed(3);
      const at::Tensor positions = at::arange(256, at::kLong).unsqueeze(0);
      for (int64_t layer = 0; layer < 3; ++layer)
        cache.write(layer, at::randn({1, 2, 256, 16}).to(dtype),
                    at::randn({1, 2, 256, 16}).to(dtype), positions);
      cache.commit(256, {test::iota(0, 256)});
      for (int kind = 0; kind < 2; ++kind) {
        std::unique_ptr<RetrievalPolicy> policy;
        if (kind == 0)
          policy = std::make_unique<LouisKvPolicy>(LouisKvOptions{}, settings(4, 16, 32, 1));
        else
          policy = std::make_unique<PageRetrievalPolicy>(8, settings(4, 16, 32, 1));
        RetrievalKvSource source(*policy, cache, 20, nullptr);
        QVERIFY(source.unit_sizes(1).size(1) > 0);
        device_bytes[kind] += (i == 0 ? 1 : -2) * source.stats().device_kv_bytes;
      }
    }
    QCOMPARE(device_bytes[0], int64_t{0});  // louiskv: f32 bytes == 2 x bf16 bytes
    QCOMPARE(device_bytes[1], int64_t{0});  // quest's min/max pages alike
  }

  // The core exactness: retrieving at every step with a budget that holds the whole pool, a
  // small window that keeps offloading, and no full layers, gives full attention's logits.
  void budgetCoveringThePoolEqualsFullAttention() {
    for (const std::string& model : {"llama-gqa", "qwen2-bias-tied"}) {
      const Decoder& decoder = models_.decoder(model);
      const auto prompt = test::token_ids(70, 1), fed = test::token_ids(30, 2);
      const auto full = teacher_forced(decoder, prompt, fed, [](KvCache&) { return nullptr; });
      for (int kind = 0; kind < 2; ++kind) {
        std::unique_ptr<RetrievalPolicy> policy;
        if (kind == 0)
          policy = std::make_unique<LouisKvPolicy>(every_step(), settings(4, 4, 200, 0));
        else
          policy = std::make_unique<PageRetrievalPolicy>(4, settings(4, 4, 200, 0));
        std::unique_ptr<RetrievalKvSource> seen;
        const auto got = teacher_forced(
            decoder, prompt, fed,
            [&](KvCache& cache) {
              return std::make_unique<RetrievalKvSource>(*policy, cache, 30, nullptr);
            },
            &seen);
        const double diff = max_diff(full, got);
        QVERIFY2(diff < 2e-4,
                 (model + " kind " + std::to_string(kind) + " max diff " + std::to_string(diff))
                     .c_str());
        QVERIFY(seen->stats().offloaded_units > 0);  // the window really offloaded
        QCOMPARE(seen->stats().retrievals, int64_t{30} * seen->stats().retrieval_layers);
      }
    }
  }

  // Unit capacity is allocated a block (1,024 units) at a time and grows as the window offloads:
  // past the first block the logits stay full attention's and the device bytes grow.
  void unitCapacityGrowsInBlocks() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const auto prompt = test::token_ids(70, 3), fed = test::token_ids(1100, 4);
    const auto full = teacher_forced(decoder, prompt, fed, [](KvCache&) { return nullptr; });
    LouisKvOptions one_token_units = every_step();
    one_token_units.min_segment_tokens = 1;  // a unit a step: past the first block soon
    LouisKvPolicy policy(one_token_units, settings(4, 4, 2048, 0));
    int64_t built_bytes = 0;
    std::unique_ptr<RetrievalKvSource> seen;
    const auto got = teacher_forced(
        decoder, prompt, fed,
        [&](KvCache& cache) {
          auto source = std::make_unique<RetrievalKvSource>(policy, cache, 1100, nullptr);
          built_bytes = source->stats().device_kv_bytes;
          return source;
        },
        &seen);
    const double diff = max_diff(full, got);
    QVERIFY2(diff < 2e-4, ("max diff " + std::to_string(diff)).c_str());
    QVERIFY(seen->unit_sizes(0).size(1) > 1024);
    QVERIFY(seen->stats().device_kv_bytes > built_bytes);
  }

  // The recorded step (core/runtime/static_decode_step.h with the source attached) decides on
  // the device and moves the per-layer path's host work between steps; it must serve the same
  // attention: the same logits, decisions, offloads and rows loaded. On the CPU its "graph" runs
  // the recorded function itself, so this checks the recording's logic in CI.
  void recordedStepMatchesThePerLayerPath() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const auto prompt = test::token_ids(400, 7), fed = test::token_ids(96, 8);
    const auto n = static_cast<int64_t>(prompt.size()), steps = static_cast<int64_t>(fed.size());
    // Kinds: 0 adaptive, 1 stride 4, 2 Quest, 3 adaptive with each layer's own τ (`rate=`).
    for (int kind = 0; kind < 4; ++kind) {
      const auto make = [&]() -> std::unique_ptr<RetrievalPolicy> {
        LouisKvOptions o;
        // Adaptive, at a τ where some steps retrieve and some do not (this fixture's random weights
        // give r_t spread around 0).
        o.tau = 0.1;
        if (kind == 1) o.stride = 4;
        if (kind == 3) o.rate_percent = 30;
        if (kind != 2) return std::make_unique<LouisKvPolicy>(o, settings(16, 32, 128, 1));
        return std::make_unique<PageRetrievalPolicy>(8, settings(16, 32, 128, 1));
      };
      const std::string what = "kind " + std::to_string(kind);
      const auto per_layer_policy = make(), recorded_policy = make();
      std::unique_ptr<RetrievalKvSource> per_layer;
      const auto expect = teacher_forced(
          decoder, prompt, fed,
          [&](KvCache& cache) {
            auto made =
                std::make_unique<RetrievalKvSource>(*per_layer_policy, cache, steps, &cache);
            made->record_map(1);
            return made;
          },
          &per_layer);

      KvCache cache(shape_of(decoder.config()), 1, n + steps + 1, decoder.dtype(),
                    decoder.device());
      gpu::DeviceTimeline timeline(decoder.device());
      (void)prefill(decoder, cache, prompt, 0, timeline, nullptr);
      RetrievalKvSource source(*recorded_policy, cache, steps, &cache);
      source.record_map(1);
      QVERIFY(source.recordable());
      StaticDecodeStep step(decoder, cache);
      // Without a working set to mirror into, the recorded step could not keep the conversation.
      const auto other = make();
      RetrievalKvSource unmirrored(*other, cache, steps, nullptr);
      QVERIFY(!unmirrored.recordable());
      QVERIFY_EXCEPTION_THROWN(step.attach(&unmirrored), std::invalid_argument);
      step.attach(&source);
      std::vector<at::Tensor> got;
      for (int64_t i = 0; i < steps; ++i)
        got.push_back(step.step(fed[i], n + i).clone());
      step.attach(nullptr);

      const double diff = max_diff(expect, got);
      QVERIFY2(diff < 1e-4, (what + " max diff " + std::to_string(diff)).c_str());
      const RetrievalStats &a = per_layer->stats(), &b = source.stats();
      QCOMPARE(b.steps, steps);
      QCOMPARE(b.retrievals, a.retrievals);
      QCOMPARE(b.offloaded_units, a.offloaded_units);
      QCOMPARE(b.loaded_rows, a.loaded_rows);
      QVERIFY(b.offloaded_units > 0);
      // Both paths draw the same retrieval map: the same retrievals, rows and units, the same r_t.
      const RetrievalMap &map_a = *per_layer->map(), &map_b = *source.map();
      QCOMPARE(map_b.steps, steps);
      QCOMPARE(map_a.steps, steps);
      QCOMPARE(map_b.retrievals.size(), map_a.retrievals.size());
      QCOMPARE(static_cast<int64_t>(map_a.retrievals.size()), a.retrievals);
      for (size_t e = 0; e < map_a.retrievals.size(); ++e) {
        const auto &x = map_a.retrievals[e], &y = map_b.retrievals[e];
        QCOMPARE(y.step, x.step);
        QCOMPARE(y.layer, x.layer);
        QCOMPARE(y.rows, x.rows);
        QCOMPARE(y.units, x.units);
        QVERIFY(x.units >= map_a.kv_heads);  // every head takes at least one unit
      }
      QCOMPARE(map_b.similarity.size(), map_a.similarity.size());
      for (size_t i = 0; i < map_a.similarity.size(); ++i) {
        const float x = map_a.similarity[i], y = map_b.similarity[i];
        QCOMPARE(std::isnan(y), std::isnan(x));
        if (!std::isnan(x)) QVERIFY(std::abs(x - y) < 1e-4f);
      }
      if (kind == 0) {
        // Adaptive: a layer retrieved exactly at the first step and where r_t fell below τ.
        QCOMPARE(map_a.tau, 0.1);
        for (int64_t step = 0; step < steps; ++step) {
          for (int64_t layer = 1; layer < map_a.layers; ++layer) {
            const float r = map_a.similarity_at(step, layer);
            QCOMPARE(std::isnan(r), step == 0);
            bool retrieved = false;
            for (const auto& e : map_a.retrievals)
              retrieved = retrieved || (e.step == step && e.layer == layer);
            QCOMPARE(retrieved, step == 0 || r < 0.1f);
          }
        }
      } else {
        QCOMPARE(map_a.tau, -1.0);  // a fixed stride, Quest and layers' own τ: no single τ
      }
      if (kind == 3) {
        // Each layer's τ moved the same way on both paths, and the host's replay of the decisions
        // ends on the device's bits.
        const auto& pa = static_cast<LouisKvPolicy&>(*per_layer_policy);
        const auto& pb = static_cast<LouisKvPolicy&>(*recorded_policy);
        bool moved = false;
        for (int64_t layer = 1; layer < decoder.config().num_layers; ++layer) {
          QCOMPARE(pb.layer_tau(layer), pa.layer_tau(layer));
          QCOMPARE(double(pa.layer_tau_on_host(layer)), pa.layer_tau(layer));
          QCOMPARE(double(pb.layer_tau_on_host(layer)), pb.layer_tau(layer));
          moved = moved || pa.layer_tau(layer) != 0.1;
        }
        QVERIFY(moved);
        // Both maps hold each layer's τ at every compared step, the same on both paths, and a
        // layer retrieved exactly where r_t fell below its own τ of that step.
        QCOMPARE(map_a.threshold.size(), map_a.similarity.size());
        QCOMPARE(map_b.threshold.size(), map_a.threshold.size());
        for (int64_t step = 0; step < steps; ++step) {
          for (int64_t layer = 1; layer < map_a.layers; ++layer) {
            const float t = map_a.threshold_at(step, layer), r = map_a.similarity_at(step, layer);
            QCOMPARE(std::isnan(t), step == 0);
            QCOMPARE(std::isnan(map_b.threshold_at(step, layer)), step == 0);
            if (step == 0) continue;
            QCOMPARE(map_b.threshold_at(step, layer), t);
            bool retrieved = false;
            for (const auto& e : map_a.retrievals)
              retrieved = retrieved || (e.step == step && e.layer == layer);
            QCOMPARE(retrieved, r < t);
          }
        }
        const RetrievalMap back = parse_retrieval_map(to_json_line(map_a));
        QCOMPARE(back.threshold.size(), map_a.threshold.size());
        QCOMPARE(back.threshold_at(steps - 1, 1), map_a.threshold_at(steps - 1, 1));
      } else {
        QVERIFY(map_a.threshold.empty());
      }
      for (int64_t layer = 1; layer < decoder.config().num_layers; ++layer)
        QVERIFY(source.unit_sizes(layer).equal(per_layer->unit_sizes(layer)));
      // The working set the recorded step mirrored into is the conversation's full KV.
      QCOMPARE(cache.lengths()[0], n + steps);
      // A fixed stride's idle steps replay a lean recording beside the full one.
      QCOMPARE(step.recordings(), kind == 1 ? int64_t{2} : int64_t{1});
      if (kind == 0 || kind == 3) {
        // Mixed decisions, so the switch inside the recording is exercised both ways.
        const auto& r_a = static_cast<LouisKvPolicy&>(*per_layer_policy).similarities();
        QVERIFY2(b.retrievals > b.retrieval_layers && b.retrievals < steps * b.retrieval_layers,
                 (what + " retrievals " + std::to_string(b.retrievals)).c_str());
        const auto& r_b = static_cast<LouisKvPolicy&>(*recorded_policy).similarities();
        QCOMPARE(r_b.size(), r_a.size());
        for (size_t layer = 0; layer < r_a.size(); ++layer) {
          QCOMPARE(r_b[layer].size(), r_a[layer].size());
          for (size_t i = 0; i < r_a[layer].size(); ++i)
            QVERIFY(std::abs(r_b[layer][i] - r_a[layer][i]) < 1e-4f);
        }
      }
    }
  }

  void smallBudgetDiffersButStaysClose() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const auto prompt = test::token_ids(200, 3), fed = test::token_ids(20, 4);
    const auto full = teacher_forced(decoder, prompt, fed, [](KvCache&) { return nullptr; });
    LouisKvPolicy policy(every_step(), settings(4, 8, 32, 0));
    const auto got = teacher_forced(decoder, prompt, fed, [&](KvCache& cache) {
      return std::make_unique<RetrievalKvSource>(policy, cache, 20, nullptr);
    });
    // Attention sees 44 of ~210 tokens: the logits move (the test would pass a source that
    // silently served everything otherwise) but stay finite.
    QVERIFY(max_diff(full, got) > 1e-4);
    for (const at::Tensor& l : got)
      QVERIFY(at::isfinite(l).all().item<bool>());
  }

  void temporalSegmentsSplitWhereTheLayerRetrieved() {
    LouisKvOptions o;
    o.stride = 4;  // boundaries at steps 0, 4, 8, ...: segments of 4 tokens
    LouisKvPolicy policy(o, settings(4, 8, 16, 1));
    const auto seen = served_24_tokens(models_.decoder("llama-gqa"), policy);
    QVERIFY(!seen->unit_sizes(0).defined());  // layer 0 keeps every token
    const at::Tensor sizes = seen->unit_sizes(1);
    const int64_t prompt_units = (36 + 15) / 16;
    QCOMPARE(sizes.size(1), prompt_units + seen->stats().offloaded_units);
    QVERIFY(seen->stats().offloaded_units >= 3);
    QVERIFY(sizes.narrow(1, prompt_units, sizes.size(1) - prompt_units).eq(4).all().item<bool>());
    QCOMPARE(seen->stats().retrievals, int64_t{6});  // steps 0, 4, ..., 20
  }

  // A layer that retrieves at every token (stride 1) has one-token temporal segments; with
  // `segment=4` they leave the window joined four at a time: a unit per four steps instead of
  // one per step.
  void shortSegmentsLeaveJoined() {
    std::vector<int64_t> offloaded;
    for (int64_t least : {1, 4}) {
      LouisKvOptions o;
      o.stride = 1;
      o.min_segment_tokens = least;
      LouisKvPolicy policy(o, settings(4, 8, 16, 1));
      const auto seen = served_24_tokens(models_.decoder("llama-gqa"), policy);
      const int64_t prompt_units = (36 + 15) / 16;
      const at::Tensor sizes = seen->unit_sizes(1);
      const at::Tensor segments = sizes.narrow(1, prompt_units, sizes.size(1) - prompt_units);
      QVERIFY(segments.size(1) > 0);
      QVERIFY2(segments.eq(least).all().item<bool>(), "every segment left at the fewest tokens");
      offloaded.push_back(seen->stats().offloaded_units);
      QCOMPARE(seen->stats().retrievals, int64_t{24});  // every step retrieves either way
    }
    // The window of 8 fills at step 8: from then one unit a step, or one every four steps.
    QCOMPARE(offloaded[0], int64_t{24 - 8});
    QCOMPARE(offloaded[1], int64_t{(24 - 8 + 3) / 4});
    QCOMPARE(make_policy("louiskv:segment=16")->spec(),
             std::string("louiskv:sinks=64,window=256,budget=1024"));
    QCOMPARE(make_policy("louiskv:segment=1")->spec(),
             std::string("louiskv:sinks=64,window=256,budget=1024,segment=1"));
  }

  // host_index=1 keeps the units' index in page-locked host memory (the device reads it in place):
  // the same replies and working set, through index growth (one-token segments), and none of the
  // index in the device's bytes.
  void indexInHostMemoryServesTheSameReply() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    const std::string spec = "louiskv:stride=1,segment=1,sinks=4,window=4,budget=64,full_layers=1";
    auto on_device = make_policy(spec);
    auto on_host = make_policy(spec + ",host_index=1");
    QVERIFY(on_host->spec().find("host_index=1") != std::string::npos);
    KvWorkingSet a(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    KvWorkingSet b(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    const auto prompt = test::token_ids(60, 9);
    const GenerationResult ra = generate(decoder, *on_device, a, {}, prompt, greedy(300), {});
    const GenerationResult rb = generate(decoder, *on_host, b, {}, prompt, greedy(300), {});
    QCOMPARE(rb.tokens, ra.tokens);
    QVERIFY(rb.retrieval.offloaded_units > 256);  // the index grew past its first block
    // The device run's bytes hold its index (past one block of 256 units, f32 fixture); the host
    // run's do not.
    const int64_t block_bytes = 256 * c.num_kv_heads * c.head_dim * 4;
    QVERIFY(ra.retrieval.device_kv_bytes - rb.retrieval.device_kv_bytes > block_bytes);
    for (int64_t l = 0; l < c.num_layers; ++l)
      QVERIFY(a.cache().keys(l).equal(b.cache().keys(l)));
  }

  // The retrieval map a traced request gets (core/trace/retrieval_map.h): every retrieval at its
  // step and layer with the rows and units it loaded. A budget that covers the pool loads every
  // unit there: the prompt's clusters and the segments offloaded by then (one at steps 8, 12, 16
  // and 20: the 8-token window, split in segments of 4 at each stride-4 retrieval, is full).
  void retrievalMapRecordsWhatEachRetrievalLoaded() {
    LouisKvOptions o;
    o.stride = 4;
    LouisKvPolicy policy(o, settings(4, 8, 1000, 1));
    const auto seen = served_24_tokens(models_.decoder("llama-gqa"), policy, 5);
    const RetrievalMap& map = *seen->map();
    QCOMPARE(map.request, int64_t{5});
    QCOMPARE(map.layers, int64_t{2});
    QCOMPARE(map.full_layers, int64_t{1});
    QCOMPARE(map.steps, int64_t{24});
    QCOMPARE(map.budget, int64_t{1000});
    QCOMPARE(map.tau, -1.0);
    QCOMPARE(map.policy, policy.spec());
    const at::Tensor sizes = seen->unit_sizes(1);  // [H, prompt units + 4 segments]
    QCOMPARE(map.kv_heads, sizes.size(0));
    const int64_t prompt_units = (36 + 15) / 16;
    QCOMPARE(sizes.size(1), prompt_units + 4);
    QCOMPARE(map.retrievals.size(), size_t{6});
    for (size_t k = 0; k < map.retrievals.size(); ++k) {
      const RetrievalMap::Retrieval& r = map.retrievals[k];
      const int64_t offloaded = std::clamp<int64_t>((r.step - 4) / 4, 0, 4);
      QCOMPARE(r.step, static_cast<int64_t>(4 * k));
      QCOMPARE(r.layer, int64_t{1});
      QCOMPARE(r.rows, 36 + 4 * offloaded);
      QCOMPARE(r.units, sizes.narrow(1, 0, prompt_units + offloaded).gt(0).sum().item<int64_t>());
    }
    for (float s : map.similarity)
      QVERIFY(std::isnan(s));  // a fixed stride compares no r_t
    // Written and read back as a trace line, the map is the same.
    const RetrievalMap back = parse_retrieval_map(to_json_line(map));
    QCOMPARE(back.retrievals.size(), map.retrievals.size());
    QCOMPARE(back.retrievals[5].units, map.retrievals[5].units);
    QCOMPARE(back.similarity.size(), map.similarity.size());
    QVERIFY(std::isnan(back.similarity[3]));
    QCOMPARE(back.policy, map.policy);
  }

  void registryBuildsAndComposes() {
    QCOMPARE(make_policy("louiskv")->spec(),
             std::string("louiskv:sinks=64,window=256,budget=1024"));
    QCOMPARE(make_policy("louiskv:tau=70")->spec(),
             std::string("louiskv:tau=70,sinks=64,window=256,budget=1024"));
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv:tau=-5"), std::invalid_argument);
    QCOMPARE(make_policy("louiskv:tau=85,sinks=32,window=512,budget=512,stride=5")->spec(),
             std::string("louiskv:tau=85,sinks=32,window=512,budget=512,stride=5"));
    QCOMPARE(make_policy("pageretrieval:budget=256")->name(), std::string("pageretrieval"));
    auto composed = make_policy("streaming:sinks=8+louiskv:budget=128");
    QCOMPARE(composed->name(), std::string("streaming+louiskv"));
    QCOMPARE(composed->spec(),
             std::string("streaming:sinks=8+louiskv:sinks=64,window=256,budget=128"));
    QVERIFY(!composed->keeps_every_token());
    QVERIFY(make_policy("louiskv")->keeps_every_token());
    QVERIFY(make_policy("louiskv")->decode_retrieval() != nullptr);
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv:tau=170"), std::invalid_argument);
    QCOMPARE(make_policy("louiskv:tau=70,rate=25")->spec(),
             std::string("louiskv:tau=70,sinks=64,window=256,budget=1024,rate=25"));
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv:rate=100"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv:rate=-1"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv:rate=25,stride=4"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv:sink=3"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("snapkv+streaming"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv+louiskv"), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(make_policy("pageretrieval:page=64,window=32"), std::invalid_argument);
    // A KV budget is the prefill policy's: louiskv alone keeps every token and refuses one.
    QVERIFY_EXCEPTION_THROWN(make_policy("louiskv", 512, 4096, 512), std::invalid_argument);
    QCOMPARE(make_policy("streaming+louiskv", 512, 4096, 512)->budget(), int64_t{512});
  }

  // Through the runner: a covering retrieval reproduces full KV's greedy tokens, and the working
  // set holds every token exactly as full KV computed it (the conversation stays exact).
  void generateWithRetrievalKeepsTheWorkingSetExact() {
    const Decoder& decoder = models_.decoder("qwen2-bias-tied");
    const ModelConfig& c = decoder.config();
    const auto prompt = test::token_ids(90, 7);
    auto run = [&](MemoryPolicy& policy, KvWorkingSet& ws) {
      GenerationOptions options = greedy(24);
      return generate(decoder, policy, ws, {}, prompt, options, {});
    };
    auto full = make_policy("full");
    KvWorkingSet full_ws(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    const GenerationResult expect = run(*full, full_ws);
    auto covering = make_policy("louiskv:stride=1,sinks=4,window=4,budget=512,full_layers=0");
    KvWorkingSet ws(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    const GenerationResult got = run(*covering, ws);
    QCOMPARE(got.tokens, expect.tokens);
    QCOMPARE(got.retrieval.steps, int64_t{23});
    QCOMPARE(ws.tokens(), full_ws.tokens());
    for (int64_t l = 0; l < c.num_layers; ++l)
      QVERIFY(at::allclose(ws.cache().keys(l), full_ws.cache().keys(l), 1e-4, 1e-4));
    // A tight budget still runs through the runner and reports its retrievals.
    auto tight = make_policy("louiskv:sinks=4,window=8,budget=16,full_layers=1");
    KvWorkingSet tight_ws(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    const GenerationResult r = run(*tight, tight_ws);
    QCOMPARE(static_cast<int64_t>(r.tokens.size()), int64_t{24});
    QVERIFY(r.retrieval.retrievals >= 1);
    QVERIFY(r.retrieval.retrievals_per_token() <= 1.0);
    QCOMPARE(tight_ws.tokens(), int64_t{90 + 23});
  }

  // offload=1: while a reply decodes, the working set's retrieval layers wait in host memory (on
  // CUDA read and written in place over PCIe); every token still lands there, so replies, the
  // working set and the next turn are those of the resident run, through a plan and a new pool.
  void offloadedWorkingSetWaitsInHostMemoryAndStaysExact() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    GenerationOptions options = greedy(12);
    const std::string spec = "louiskv:stride=3,sinks=4,window=8,budget=16,full_layers=1";
    auto resident = make_policy(spec);  // the default: offload on CUDA only
    auto offloaded = make_policy(spec + ",offload=1");
    QVERIFY(make_policy(spec + ",offload=0")->spec().find("offload=0") != std::string::npos);
    QVERIFY(offloaded->spec().find("offload=1") != std::string::npos);
    KvWorkingSet a(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    KvWorkingSet b(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    const auto prompt = test::token_ids(60, 9);
    const GenerationResult ra = generate(decoder, *resident, a, {}, prompt, options, {});
    const int64_t version = b.cache().storage_version();
    const GenerationResult rb = generate(decoder, *offloaded, b, {}, prompt, options, {});
    QCOMPARE(rb.tokens, ra.tokens);
    QCOMPARE(a.cache().host_layers(), int64_t{0});
    QCOMPARE(b.cache().host_layers(), c.num_layers - 1);  // every retrieval layer
    QVERIFY(b.cache().storage_version() != version);      // a recorded step records again
    const auto same_kv = [&] {
      if (a.tokens() != b.tokens()) return false;
      for (int64_t l = 0; l < c.num_layers; ++l)
        if (!a.cache().keys(l).equal(b.cache().keys(l)) ||
            !a.cache().values(l).equal(b.cache().values(l)))
          return false;
      return true;
    };
    QVERIFY(same_kv());
    // The next turn prefills over the restored layers and moves them out again.
    std::vector<int64_t> history = prompt;
    history.insert(history.end(), ra.tokens.begin(), ra.tokens.end() - 1);
    const auto question = test::token_ids(20, 4);
    const GenerationResult ra2 = generate(decoder, *resident, a, history, question, options, {});
    const GenerationResult rb2 = generate(decoder, *offloaded, b, history, question, options, {});
    QCOMPARE(rb2.tokens, ra2.tokens);
    QCOMPARE(b.cache().host_layers(), c.num_layers - 1);
    QVERIFY(same_kv());
    b.cache().restore_layers();
    QCOMPARE(b.cache().host_layers(), int64_t{0});
    QVERIFY(same_kv());

    // Composed with a bounded prefill policy: the working set fills, a plan shrinks it (on the
    // device), a new pool is built and the layers move out again.
    const std::string bounded =
        "streaming:sinks=4+louiskv:sinks=4,window=8,budget=32,full_layers=1";
    auto p1 = make_policy(bounded, 64, c.max_positions, 32);
    auto p2 = make_policy(bounded + ",offload=1", 64, c.max_positions, 32);
    KvWorkingSet w1(shape_of(c), 64 + 32, decoder.dtype(), decoder.device(), c.max_positions);
    KvWorkingSet w2(shape_of(c), 64 + 32, decoder.dtype(), decoder.device(), c.max_positions);
    options.max_new_tokens = 80;
    options.prefill_chunk = 32;
    const auto long_prompt = test::token_ids(150, 8);
    const GenerationResult r1 = generate(decoder, *p1, w1, {}, long_prompt, options, {});
    const GenerationResult r2 = generate(decoder, *p2, w2, {}, long_prompt, options, {});
    QCOMPARE(r2.tokens, r1.tokens);
    QCOMPARE(w2.cache().host_layers(), c.num_layers - 1);
    QCOMPARE(w2.stream_tokens(), w1.stream_tokens());
    // A bounded prefill plans after its blocks: its source's units are made after the first
    // token, never beside the prefill.
    QCOMPARE(r2.retrieval.units_beside_prefill, int64_t{0});
    QVERIFY(r2.retrieval.retrieval_layers > 0);
  }

  // The prompt's units and the offload's copies made layer by layer beside the prefill (the
  // default) are those made after the first token (overlap=0): the same reply to the last logit,
  // the same pool, the same working set in host memory, and the next turn too. A prompt split
  // into blocks hands over only its last block's layers (then final), every retrieval layer once.
  void promptUnitsBesideThePrefillEqualThoseAfterIt() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    for (const std::string spec :
         {std::string("louiskv:stride=3,sinks=4,window=8,budget=16,full_layers=1,offload=1"),
          std::string("louiskv:sinks=4,window=8,budget=16,full_layers=1,offload=0"),
          std::string("pageretrieval:page=4,sinks=4,window=8,budget=16,full_layers=1")}) {
      auto beside = make_policy(spec);
      auto after = make_policy(spec + ",overlap=0");
      QVERIFY(beside->spec().find("overlap") == std::string::npos);
      QVERIFY(after->spec().find("overlap=0") != std::string::npos);
      KvWorkingSet a(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
      KvWorkingSet b(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
      GenerationOptions options = greedy(14);
      options.prefill_chunk = 24;  // 70 tokens: three blocks
      std::vector<at::Tensor> la, lb;
      const auto prompt = test::token_ids(70, 5);
      options.on_logits = [&](const at::Tensor& l) { la.push_back(l.clone()); };
      const GenerationResult ra = generate(decoder, *beside, a, {}, prompt, options, {});
      options.on_logits = [&](const at::Tensor& l) { lb.push_back(l.clone()); };
      const GenerationResult rb = generate(decoder, *after, b, {}, prompt, options, {});
      QCOMPARE(ra.tokens, rb.tokens);
      QCOMPARE(la.size(), lb.size());
      for (size_t i = 0; i < la.size(); ++i)
        QVERIFY(la[i].equal(lb[i]));
      QCOMPARE(ra.retrieval.units_beside_prefill, c.num_layers - 1);
      QCOMPARE(rb.retrieval.units_beside_prefill, int64_t{0});
      QCOMPARE(ra.retrieval.kmeans_rounds, rb.retrieval.kmeans_rounds);
      QCOMPARE(ra.retrieval.retrievals, rb.retrieval.retrievals);
      QCOMPARE(ra.retrieval.loaded_rows, rb.retrieval.loaded_rows);
      QCOMPARE(a.cache().host_layers(), b.cache().host_layers());
      const auto same_kv = [&] {
        for (int64_t l = 0; l < c.num_layers; ++l)
          if (!a.cache().keys(l).equal(b.cache().keys(l)) ||
              !a.cache().values(l).equal(b.cache().values(l)))
            return false;
        return a.tokens() == b.tokens();
      };
      QVERIFY(same_kv());
      std::vector<int64_t> history = prompt;
      history.insert(history.end(), ra.tokens.begin(), ra.tokens.end() - 1);
      const auto question = test::token_ids(30, 6);
      options.on_logits = {};
      const GenerationResult ra2 = generate(decoder, *beside, a, history, question, options, {});
      const GenerationResult rb2 = generate(decoder, *after, b, history, question, options, {});
      QCOMPARE(ra2.tokens, rb2.tokens);
      QCOMPARE(ra2.retrieval.units_beside_prefill, c.num_layers - 1);
      QVERIFY(same_kv());
    }
  }

  // A reply that stops at its first token leaves nothing of the work beside the prefill behind:
  // no staged layers, the working set on the device, and the next turn as without it.
  void workBesideThePrefillIsDroppedWhenTheReplyStopsAtOnce() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    const std::string spec = "louiskv:stride=3,sinks=4,window=8,budget=16,full_layers=1,offload=1";
    auto beside = make_policy(spec);
    auto after = make_policy(spec + ",overlap=0");
    KvWorkingSet a(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    KvWorkingSet b(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    const auto prompt = test::token_ids(50, 3);
    GenerationOptions options = greedy(8);
    const auto stop_at_once = [](int64_t) { return false; };
    const GenerationResult ra = generate(decoder, *beside, a, {}, prompt, options, stop_at_once);
    const GenerationResult rb = generate(decoder, *after, b, {}, prompt, options, stop_at_once);
    QCOMPARE(ra.tokens.size(), size_t{1});
    QCOMPARE(ra.tokens, rb.tokens);
    QCOMPARE(a.cache().host_layers(), int64_t{0});
    std::vector<int64_t> history = prompt;
    const auto question = test::token_ids(10, 7);
    const GenerationResult ra2 = generate(decoder, *beside, a, history, question, options, {});
    const GenerationResult rb2 = generate(decoder, *after, b, history, question, options, {});
    QCOMPARE(ra2.tokens, rb2.tokens);
    QCOMPARE(a.cache().host_layers(), c.num_layers - 1);
  }

  // The layer timeline's retrieval events: one "retrieve" interval on the copy lane of a layer
  // for every retrieval the source made there, with the rows it loaded.
  void retrievalsAreTracedPerLayer() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    auto policy = make_policy("louiskv:stride=3,sinks=4,window=8,budget=16,full_layers=1");
    KvWorkingSet ws(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
    test::CollectedIntervals seen;
    GenerationOptions options = greedy(10);
    options.observer = &seen;
    options.trace = true;
    const GenerationResult r =
        generate(decoder, *policy, ws, {}, test::token_ids(50, 12), options, {});
    std::vector<int64_t> steps;
    for (const LayerInterval& i : seen.intervals) {
      if (i.what != "retrieve") continue;
      QCOMPARE(i.layer, int64_t{1});  // layer 0 keeps every token
      QCOMPARE(i.lane, TraceLane::kCopy);
      QCOMPARE(i.tokens, int64_t{16});
      steps.push_back(i.step);
    }
    // Nine decode forwards (steps 1..9), the source retrieving at its steps 0, 3, 6.
    QCOMPARE(static_cast<int64_t>(steps.size()), r.retrieval.retrievals);
    QCOMPARE(steps, (std::vector<int64_t>{1, 4, 7}));
  }

  void composedWithABoundedPrefillPolicy() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    auto policy = make_policy("streaming:sinks=4+louiskv:sinks=4,window=8,budget=32,full_layers=1",
                              64, c.max_positions, 32);
    KvWorkingSet ws(shape_of(c), 64 + 32, decoder.dtype(), decoder.device(), c.max_positions);
    GenerationOptions options =
        greedy(80);  // passes the working set's capacity: a plan, a new pool
    options.prefill_chunk = 32;
    const GenerationResult r =
        generate(decoder, *policy, ws, {}, test::token_ids(150, 8), options, {});
    QCOMPARE(static_cast<int64_t>(r.tokens.size()), int64_t{80});
    QVERIFY(ws.tokens() <= 64 + 32);
    QCOMPARE(ws.stream_tokens(), int64_t{150 + 79});
    QVERIFY(r.retrieval.steps == 79);
  }

  // H2O (the paper's dropping baseline): the heaviest accumulated hitters + the recent half.
  void h2oKeepsHeavyHittersAndTheRecentHalf() {
    H2oPolicy h2o;
    auto feed = [&](std::vector<float> a, std::vector<float> b) {
      LayerView view;
      view.layer = 0;
      view.k = at::zeros({1, 1, 1, 4});
      view.probs = at::cat({at::tensor(a).view({1, 1, 1, 6}), at::tensor(b).view({1, 1, 1, 6})}, 1);
      h2o.on_layer(view);  // two query heads of one KV head, one row each
    };
    feed({0.1f, 0.5f, 0.0f, 0.2f, 0.1f, 0.1f}, {0.0f, 0.1f, 0.0f, 0.6f, 0.2f, 0.1f});
    feed({0.3f, 0.0f, 0.1f, 0.0f, 0.3f, 0.3f}, {0.0f, 0.0f, 0.0f, 0.0f, 0.5f, 0.5f});
    QVERIFY(at::allclose(h2o.layer_scores(0),
                         at::tensor({0.4f, 0.6f, 0.1f, 0.8f, 1.1f, 1.0f}).view({1, 6})));
    WorkingSetInfo ws;
    ws.tokens = 6;
    ws.layers = 1;
    ws.kv_heads = 1;
    const auto plan = h2o.shrink(ws, 4);
    QVERIFY(plan.has_value());
    // Recent: slots 4, 5; heavy among 0..3: slots 3 (0.8) and 1 (0.6), in slot order.
    QCOMPARE(plan->list(0, 0), (std::vector<int64_t>{1, 3, 4, 5}));
    QVERIFY(at::allclose(h2o.layer_scores(0), at::tensor({0.6f, 0.8f, 1.1f, 1.0f}).view({1, 4})));
  }

  void h2oWithABudgetAboveTheHistoryIsFullKv() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    GenerationOptions options = greedy(16);
    options.prefill_chunk = 32;
    auto run = [&](const std::string& spec, int64_t budget) {
      auto policy = make_policy(spec, budget, c.max_positions, 32);
      KvWorkingSet ws(shape_of(c), budget > 0 ? budget + 32 : 0, decoder.dtype(), decoder.device(),
                      c.max_positions);
      return generate(decoder, *policy, ws, {}, test::token_ids(60, 11), options, {});
    };
    QCOMPARE(run("h2o", 128).tokens, run("full", 0).tokens);
    const GenerationResult tight = run("h2o", 32);
    QVERIFY(tight.peak_kv_tokens <= 32 + 32);
    QVERIFY(tight.evicted_tokens > 0);
  }

  void promptByDecodeFeedsTheQuestionThroughRetrieval() {
    const Decoder& decoder = models_.decoder("llama-gqa");
    const ModelConfig& c = decoder.config();
    const auto history = test::token_ids(100, 9), question = test::token_ids(12, 10);
    GenerationOptions options = greedy(6);
    auto answer = [&](const std::string& spec) {
      auto policy = make_policy(spec);
      KvWorkingSet ws(shape_of(c), 0, decoder.dtype(), decoder.device(), c.max_positions);
      GenerationOptions fill = options;
      fill.max_new_tokens = 1;
      (void)generate(decoder, *policy, ws, {}, history, fill, {});
      ws.truncate(static_cast<int64_t>(history.size()));
      return generate(decoder, *policy, ws, history, question, options, {});
    };
    const GenerationResult full = answer("full");
    const GenerationResult covering =
        answer("louiskv:prompt=1,stride=1,sinks=4,window=4,budget=512,full_layers=0");
    QCOMPARE(covering.tokens, full.tokens);
    QCOMPARE(covering.retrieval.steps, int64_t{12 + 5});  // the question, then the answer
  }
};

QTEST_APPLESS_MAIN(LouisKvTest)
#include "test_louiskv.moc"
