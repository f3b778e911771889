// EpiCache (issue 15): the clustering recovers hand-made episodes deterministically and routes a
// query to the nearest centroid; the runner's patched-prompt block prefill never keeps the
// patch's KV and stays under budget + block + |patch|; with a budget above the history the policy
// equals full KV; its scores equal Eq. 3 computed by hand from the layer's queries and keys.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/engine/generator.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/working_set.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/episode_clustering.h"
#include "core/policies/full_policy.h"
#include "core/policies/lexical_embedding.h"
#include "core/policies/policy_registry.h"
#include "core/policies/text_embedding.h"
#include "core/runtime/attention.h"
#include "gpu/device_timeline.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

struct Run {
  std::vector<int64_t> tokens;
  GenerationResult result;
};

Run run_policy(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
               const std::vector<int64_t>& prompt, int64_t new_tokens, int64_t block) {
  GenerationOptions options;
  options.max_new_tokens = new_tokens;
  options.stop_at_eos = false;
  options.prefill_chunk = block;
  options.sampling.temperature = 0;
  Run run;
  run.result = generate(decoder, policy, ws, {}, prompt, options, [&](int64_t t) {
    run.tokens.push_back(t);
    return true;
  });
  return run;
}

// Three tight groups around orthogonal directions, windows interleaved.
std::vector<Embedding> three_groups() {
  std::vector<Embedding> out;
  for (int i = 0; i < 12; ++i) {
    Embedding v(6, 0.0f);
    v[static_cast<size_t>(i % 3) * 2] = 1.0f;
    v[static_cast<size_t>((i % 3) * 2 + 1)] = 0.05f * static_cast<float>(i / 3);  // spread
    v[(static_cast<size_t>(i % 3) * 2 + 2) % 6] = 0.01f * static_cast<float>(i % 4);
    out.push_back(v);
  }
  return out;
}

std::unique_ptr<EpiCachePolicy> epicache(int64_t budget, std::vector<int64_t> patch,
                                         EpiCacheOptions o = {}) {
  auto p = std::make_unique<EpiCachePolicy>(o);
  p->set_budget(budget);
  p->set_patch(std::move(patch));
  return p;
}

// Layer 0 of a 2-KV-head model attended with `probs` [1, 4, 1, T] (the patch's own column last):
// what the policy then knows of a working set of `tokens` slots.
WorkingSetInfo observe_one_layer(EpiCachePolicy& policy, const at::Tensor& probs, int64_t tokens) {
  LayerView view;
  view.layer = 0;
  view.probs = probs;
  view.k = at::zeros({1, 2, 1, 4});
  policy.on_layer(view);
  WorkingSetInfo ws;
  ws.tokens = tokens;
  ws.layers = 1;
  ws.kv_heads = 2;
  return ws;
}

}  // namespace

class EpiCacheTest : public QObject {
  Q_OBJECT

  test::FixtureModels models_;
  const Decoder& decoder(const std::string& name) { return models_.decoder(name); }

 private Q_SLOTS:
  void initTestCase() { models_.load({"llama-gqa", "qwen2-bias-tied"}); }

  void windowsCoverTheUtterancesInFours() {
    const auto w = utterance_windows(2, 12, 4);
    QCOMPARE(w.size(), size_t{3});
    QCOMPARE(w[0].begin, size_t{2});
    QCOMPARE(w[0].end, size_t{6});
    QCOMPARE(w[2].begin, size_t{10});
    QCOMPARE(w[2].end, size_t{12});
  }

  void clusteringRecoversTheGroupsDeterministically() {
    const auto x = three_groups();
    ClusteringOptions o;
    o.episodes = 3;
    const EpisodeClustering c = cluster_episodes(x, o);
    QCOMPARE(c.episodes(), int64_t{3});
    // Windows i and j share an episode exactly when they share a group.
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t j = 0; j < x.size(); ++j)
        QCOMPARE(c.assignment[i] == c.assignment[j], i % 3 == j % 3);
    // Episodes are numbered by their first window; centroids are unit length.
    QCOMPARE(c.assignment[0], 0);
    QCOMPARE(c.assignment[1], 1);
    for (const Embedding& centroid : c.centroids)
      QVERIFY(std::abs(cosine(centroid, centroid) - 1.0) < 1e-6);
    // The medoid is the member with the highest cosine to its centroid.
    for (int64_t e = 0; e < c.episodes(); ++e) {
      double best = -2;
      size_t arg = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (c.assignment[i] != e) continue;
        Embedding v = x[i];
        normalize(v);
        if (cosine(v, c.centroids[e]) > best) {
          best = cosine(v, c.centroids[e]);
          arg = i;
        }
      }
      QCOMPARE(c.medoids[e], arg);
    }
    // Same seed, same result.
    const EpisodeClustering again = cluster_episodes(x, o);
    QCOMPARE(again.assignment, c.assignment);
    QCOMPARE(again.medoids, c.medoids);
  }

  // The restarts run on threads; the result is the one-thread result, bit for bit (the seedings
  // come from one generator in order and the first lowest inertia wins).
  void clusteringOnThreadsEqualsOneThread() {
    std::mt19937 rng(11);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<Embedding> x(400, Embedding(48));
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t d = 0; d < 48; ++d)
        x[i][d] = noise(rng) + (d % 5 == i % 5 ? 2.0f : 0.0f);  // five loose groups
    ClusteringOptions o;
    o.episodes = 4;
    o.restarts = 8;
    o.threads = 1;
    const EpisodeClustering one = cluster_episodes(x, o);
    for (int32_t threads : {2, 3, 8}) {
      o.threads = threads;
      const EpisodeClustering many = cluster_episodes(x, o);
      QCOMPARE(many.assignment, one.assignment);
      QCOMPARE(many.medoids, one.medoids);
      QCOMPARE(many.centroids, one.centroids);
      QCOMPARE(many.inertia, one.inertia);
    }
    // A different seed draws other seedings: the comparison above is not vacuous.
    o.seed = 7;
    o.restarts = 1;
    o.threads = 1;
    const EpisodeClustering other = cluster_episodes(x, o);
    QVERIFY(other.inertia != one.inertia);
  }

  void moreEpisodesThanWindowsAreDropped() {
    ClusteringOptions o;
    o.episodes = 4;
    const EpisodeClustering two = cluster_episodes({{1, 0}, {0, 1}}, o);
    QCOMPARE(two.episodes(), int64_t{2});
    QVERIFY(two.assignment[0] != two.assignment[1]);
    // Identical windows are one episode however many are asked for.
    const EpisodeClustering same = cluster_episodes({{1, 2}, {1, 2}, {2, 4}}, o);
    QCOMPARE(same.episodes(), int64_t{1});
    QCOMPARE(same.medoids[0], size_t{0});
    QVERIFY_EXCEPTION_THROWN(cluster_episodes({}, o), std::invalid_argument);
  }

  void routingPicksTheNearestCentroid() {
    ClusteringOptions o;
    o.episodes = 3;
    const auto x = three_groups();
    const EpisodeClustering c = cluster_episodes(x, o);
    for (size_t g = 0; g < 3; ++g) {
      Embedding q(6, 0.0f);
      q[g * 2] = 0.9f;
      q[(g * 2 + 3) % 6] = 0.3f;  // off-axis, still nearest its group
      QCOMPARE(nearest_episode(c.centroids, q), c.assignment[g]);
    }
    QCOMPARE(nearest_episode({{1, 0}, {0.6f, 0.8f}}, {0.5f, 0.9f}), 1);
  }

  // The model-free embedding: stems by 4-letter prefix without the speaker words, and a query
  // routes to the window that shares its rare words.
  void lexicalEmbeddingMatchesSharedWords() {
    QCOMPARE(LexicalEmbedder::stems("User said, \"I moved to Denver!\""),
             (std::vector<std::string>{"move", "denv"}));
    const std::vector<std::string> windows = {
        "User said, \"I moved to Denver last week.\"\nAssistant said, \"Nice city.\"\n",
        "User said, \"My sister Ana adopted a cat.\"\nAssistant said, \"Lovely!\"\n",
        "User said, \"I ran a half marathon.\"\nAssistant said, \"Well done.\"\n"};
    const LexicalEmbedder embedder(windows);
    std::vector<Embedding> e;
    for (const std::string& w : windows)
      e.push_back(embedder.embed(w));
    QCOMPARE(nearest_episode(e, embedder.embed("What pet did the sister adopt?")), 1);
    QCOMPARE(nearest_episode(e, embedder.embed("Where did the user move?")), 0);
    QCOMPARE(nearest_episode(e, embedder.embed("How long was the marathon?")), 2);
  }

  void registryParsesTheOptions() {
    QCOMPARE(make_policy("epicache")->spec(), std::string("epicache"));
    QCOMPARE(make_policy("epicache:episodes=2,patch=1")->spec(),
             std::string("epicache:episodes=2,patch=1"));
    QCOMPARE(make_policy("epicache:embed=1")->spec(), std::string("epicache:embed=1"));
    QVERIFY_EXCEPTION_THROWN(make_policy("epicache:patch=3"), std::invalid_argument);
    // Without a patch (chat, generate: no episodes yet) it probes the block's last 64 rows.
    EpiCachePolicy bare;
    BlockInfo block;
    block.fresh_tokens = 100;
    block.will_evict = true;
    QVERIFY(bare.patch_tokens().empty());
    QCOMPARE(bare.probe_rows(block).size(), size_t{64});
    QCOMPARE(bare.probe_rows(block).front(), int64_t{36});
    bare.set_patch({5, 6});
    QCOMPARE(bare.patch_tokens(), (std::vector<int64_t>{5, 6}));
    QVERIFY(bare.probe_rows(block).empty());
    QVERIFY_EXCEPTION_THROWN(make_policy("epicache:episode=3"), std::invalid_argument);
  }

  // With a budget above the history nothing is evicted and no patch is forwarded: full KV's
  // tokens, bit for bit.
  void aboveTheHistoryEqualsFull_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("patch");
    for (const char* m : {"llama-gqa", "qwen2-bias-tied"})
      for (int p : {0, 2})
        QTest::newRow((std::string(m) + "/patch" + std::to_string(p)).c_str()) << m << p;
  }
  void aboveTheHistoryEqualsFull() {
    QFETCH(QString, model);
    QFETCH(int, patch);
    const Decoder& d = decoder(model.toStdString());
    const auto prompt = test::token_ids(70);
    FullPolicy full;
    KvWorkingSet full_ws(shape_of(d.config()), 0, d.dtype(), d.device(), d.config().max_positions);
    const Run reference = run_policy(d, full, full_ws, prompt, 12, 16);
    EpiCacheOptions o;
    o.patch = static_cast<PatchKind>(patch);
    auto policy = epicache(200, test::token_ids(9, 3), o);
    KvWorkingSet ws(shape_of(d.config()), 200 + 16 + 9, d.dtype(), d.device(),
                    d.config().max_positions);
    const Run got = run_policy(d, *policy, ws, prompt, 12, 16);
    QCOMPARE(got.tokens, reference.tokens);
    QCOMPARE(got.result.evicted_tokens, int64_t{0});
    QCOMPARE(got.result.peak_kv_tokens, reference.result.peak_kv_tokens);
  }

  // Past the budget the patch is forwarded after every block (peak = budget + block + |patch|
  // exactly) and dropped again: afterwards every slot holds a history token.
  void patchIsForwardedAndNeverRetained() {
    const Decoder& d = decoder("qwen2-bias-tied");
    const int64_t budget = 48, block = 16, patch = 10;
    auto policy = epicache(budget, test::token_ids(patch, 5));
    const auto prompt = test::token_ids(d.config().max_positions + 300, 4);  // past the positions
    KvWorkingSet ws(shape_of(d.config()), budget + block + patch, d.dtype(), d.device(),
                    d.config().max_positions);
    GenerationOptions options;
    options.prefill_chunk = block;
    gpu::DeviceTimeline timeline(d.device());
    policy->begin_request(ws.info());
    ws.reset_peak();
    prefill(d, *policy, ws, prompt, block, timeline, nullptr);
    QCOMPARE(ws.peak_tokens(), budget + block + patch);
    QCOMPARE(ws.tokens(), budget);
    QCOMPARE(ws.stream_tokens(), static_cast<int64_t>(prompt.size()));
    const at::Tensor slots = ws.slot_stream();
    QVERIFY(slots.max().item<int64_t>() < static_cast<int64_t>(prompt.size()));
    QVERIFY(slots.min().item<int64_t>() >= 0);
    // The last `tail` slots are the stream's last tokens, in order.
    for (int64_t j = 0; j < 32; ++j)
      QCOMPARE(slots[0][0][budget - 32 + j].item<int64_t>(),
               static_cast<int64_t>(prompt.size()) - 32 + j);
  }

  // A working set of only budget + block still works: the runner cuts the block to fit the patch.
  void peakStaysUnderBudgetPlusBlockPlusPatch() {
    const Decoder& d = decoder("llama-gqa");
    const int64_t budget = 48, block = 16, patch = 10;
    for (const int64_t capacity : {budget + block, budget + block + patch}) {
      auto policy = epicache(budget, test::token_ids(patch, 6));
      KvWorkingSet ws(shape_of(d.config()), capacity, d.dtype(), d.device(),
                      d.config().max_positions);
      const auto prompt = test::token_ids(d.config().max_positions + 100, 7);
      const Run r = run_policy(d, *policy, ws, prompt, 40, block);
      QCOMPARE(static_cast<int64_t>(r.tokens.size()), int64_t{40});
      QVERIFY(r.result.peak_kv_tokens <= budget + block + patch);
      QVERIFY(r.result.peak_kv_tokens <= capacity);
    }
  }

  // Eq. 3 by hand: for each KV head and cached token, the max over the patch rows and the
  // group's query heads of softmax(q . k / sqrt(d)) taken over the cached keys only.
  void scoresEqualEquationThreeByHand() {
    const Decoder& d = decoder("llama-gqa");
    const ModelConfig& c = d.config();
    const int64_t cached = 23, patch = 5;
    // Scored from the probed rows' probabilities, and (as the runner's patch forward does,
    // patch_probabilities() false) from the queries and keys alone: both are Eq. 3.
    for (const bool probed : {true, false}) {
      KvCache cache(shape_of(c), 1, cached + patch, d.dtype(), d.device());
      CacheKvSource source(cache);
      gpu::DeviceTimeline timeline(d.device());
      ForwardRequest fill;
      fill.tokens = {test::token_ids(cached, 8)};
      fill.positions = {std::vector<int64_t>(cached)};
      for (int64_t i = 0; i < cached; ++i)
        fill.positions[0][i] = i;
      d.forward(fill, source, timeline, nullptr);
      EpiCachePolicy policy;
      policy.set_patch(test::token_ids(patch, 9));
      QVERIFY(!policy.patch_probabilities());
      std::vector<at::Tensor> q(c.num_layers), k(c.num_layers);
      ForwardRequest req;
      req.tokens = {test::token_ids(patch, 9)};
      req.positions = {std::vector<int64_t>(patch)};
      for (int64_t i = 0; i < patch; ++i) {
        req.positions[0][i] = cached + i;
        if (probed) req.probe_rows.push_back(i);
      }
      req.on_layer = [&](const LayerView& v) {
        q[v.layer] = v.q.to(at::kDouble).clone();
        k[v.layer] = v.kv.keys.to(at::kDouble).clone();
        policy.on_layer(v);
      };
      d.forward(req, source, timeline, nullptr);

      const int64_t hq = c.num_heads, hkv = c.num_kv_heads, g = hq / hkv;
      for (int64_t l = 0; l < c.num_layers; ++l) {
        const at::Tensor got = policy.layer_scores(l);
        QCOMPARE(got.size(0), hkv);
        QCOMPARE(got.size(1), cached);
        for (int64_t h = 0; h < hkv; ++h) {
          std::vector<double> want(cached, 0.0);
          for (int64_t qh = h * g; qh < (h + 1) * g; ++qh) {
            for (int64_t r = 0; r < patch; ++r) {
              std::vector<double> logit(cached);
              double top = -1e300, sum = 0;
              for (int64_t i = 0; i < cached; ++i) {
                logit[i] = (q[l][0][qh][r] * k[l][0][h][i]).sum().item<double>() /
                           std::sqrt(static_cast<double>(c.head_dim));
                top = std::max(top, logit[i]);
              }
              for (int64_t i = 0; i < cached; ++i)
                sum += std::exp(logit[i] - top);
              for (int64_t i = 0; i < cached; ++i)
                want[i] = std::max(want[i], std::exp(logit[i] - top) / sum);
            }
          }
          for (int64_t i = 0; i < cached; ++i) {
            const double diff = std::abs(got[h][i].item<double>() - want[i]);
            QVERIFY2(diff < 1e-5, qPrintable(QString("%6: layer %1 head %2 token %3: %4 vs %5")
                                                 .arg(l)
                                                 .arg(h)
                                                 .arg(i)
                                                 .arg(got[h][i].item<double>())
                                                 .arg(want[i])
                                                 .arg(probed ? "probed" : "queries")));
          }
        }
      }
    }
  }

  // With a sliding window and a ragged set's hidden slots, the score from queries and keys is
  // still the probed probabilities renormalised over the cached columns (Eq. 3), hidden columns
  // and rows that see nothing scoring 0.
  void patchScoreFromQueriesHonoursMasks() {
    at::manual_seed(3);
    const int64_t hq = 4, hkv = 2, r = 5, cached = 37, d = 16;
    const at::Tensor q = at::randn({1, hq, r, d});
    AttendKv kv;
    kv.keys = at::randn({1, hkv, cached + r, d});
    kv.values = at::randn({1, hkv, cached + r, d});
    kv.key_positions = at::arange(cached + r, at::kLong).unsqueeze(0);
    const at::Tensor positions = at::arange(cached, cached + r, at::kLong).unsqueeze(0);
    for (const std::optional<int64_t> window :
         {std::optional<int64_t>{}, std::optional<int64_t>{20}}) {
      for (const bool ragged : {false, true}) {
        kv.key_valid = ragged ? at::rand({1, hkv, cached + r}).gt(0.3) : at::Tensor();
        if (ragged) kv.key_valid.narrow(2, cached, r).fill_(true);
        const at::Tensor want =
            patch_scores(attention_probabilities(q, kv, positions, window), hkv, cached, true);
        const at::Tensor got = cached_attention_max(q, kv, positions, window, cached)[0];
        QCOMPARE(got.sizes(), want.sizes());
        QVERIFY(at::allclose(got, want, 1e-5, 1e-7));
        if (window)
          QCOMPARE(got.narrow(1, 0, cached + 1 - *window).abs().sum().item<double>(), 0.0);
      }
    }
  }

  // The snapkv window (a block's last rows, among the keys) scored from queries and keys with
  // `causal` is the max of its probed probabilities over every key (what the runner's probe rows
  // gave before probe_probabilities()), with a window and a ragged set's hidden slots too;
  // without `causal` (and no other mask) the rows would see the block's later keys.
  void windowScoreFromQueriesIsTheProbedMax() {
    at::manual_seed(4);
    const int64_t hq = 4, hkv = 2, r = 6, t = 45, d = 16;
    const at::Tensor q = at::randn({1, hq, r, d});
    AttendKv kv;
    kv.keys = at::randn({1, hkv, t, d});
    kv.values = at::randn({1, hkv, t, d});
    kv.key_positions = at::arange(t, at::kLong).unsqueeze(0);
    const at::Tensor positions = at::arange(t - r, t, at::kLong).unsqueeze(0);
    for (const std::optional<int64_t> window :
         {std::optional<int64_t>{}, std::optional<int64_t>{20}}) {
      for (const bool ragged : {false, true}) {
        kv.key_valid = ragged ? at::rand({1, hkv, t}).gt(0.3) : at::Tensor();
        if (ragged) kv.key_valid.narrow(2, t - r, r).fill_(true);
        const at::Tensor want =
            patch_scores(attention_probabilities(q, kv, positions, window), hkv, t, false);
        const at::Tensor got = cached_attention_max(q, kv, positions, window, t, true)[0];
        QCOMPARE(got.sizes(), want.sizes());
        QVERIFY(at::allclose(got, want, 1e-5, 1e-7));
        if (!window && !ragged) {  // (any mask there is built from the positions: causal)
          const at::Tensor unmasked = cached_attention_max(q, kv, positions, window, t)[0];
          QVERIFY(!at::allclose(unmasked, want, 1e-3, 1e-5));
        }
      }
    }
  }

  // The plan keeps each head's top-scored tokens (and the tail).
  void shrinkKeepsTheTopScoredPerHead() {
    EpiCacheOptions o;
    o.tail = 2;
    EpiCachePolicy policy(o);
    policy.set_patch({7});
    // probs [1, Hq=4, R=1, T=8] with 2 KV heads: the last column is the patch's own.
    at::Tensor probs = at::zeros({1, 4, 1, 8});
    const float head0[] = {0.1f, 0.5f, 0.0f, 0.3f, 0.05f, 0.0f, 0.0f, 0.05f};
    const float head3[] = {0.4f, 0.0f, 0.2f, 0.0f, 0.0f, 0.3f, 0.0f, 0.1f};
    for (int64_t i = 0; i < 8; ++i) {
      probs[0][0][0][i] = head0[i];
      probs[0][3][0][i] = head3[i];
    }
    const auto plan = policy.shrink(observe_one_layer(policy, probs, 7), 4);
    QVERIFY(plan.has_value());
    // Head 0 (query heads 0, 1): top 2 of slots 0..4 are 1 and 3; head 1: 0 and 2; tail 5, 6.
    QCOMPARE(plan->list(0, 0), (std::vector<int64_t>{1, 3, 5, 6}));
    QCOMPARE(plan->list(0, 1), (std::vector<int64_t>{0, 2, 5, 6}));
  }

  // per_head=2 (Ada-KV's joint selection) under a layer budget below the slot budget: each
  // layer keeps its top M·H (head, token) pairs by score, no head more than the slot budget,
  // ties to the lower head and token (a greedy pass over a stable sort, computed here by hand),
  // with scores full of ties and with one head that would take more than the cap.
  void jointSelectionTakesTheTopPairsUnderTheCap() {
    const int64_t tokens = 40, tail = 2, budget = 20, m = 12;
    for (const bool dominated : {false, true}) {
      EpiCacheOptions o;
      o.tail = tail;
      o.per_head = 2;
      EpiCachePolicy policy(o);
      policy.set_budget(budget);
      policy.set_layer_budgets({m});
      policy.set_patch({7});
      at::manual_seed(dominated ? 2 : 1);
      // Scores in tenths (many ties); query heads 0 and 3 stand for KV heads 0 and 1.
      at::Tensor probs = at::zeros({1, 4, 1, tokens + 1});
      at::Tensor raw0 = at::randint(0, 5, {tokens}).to(at::kFloat) / 10;
      at::Tensor raw1 = at::randint(0, 5, {tokens}).to(at::kFloat) / 10;
      if (dominated) {  // head 0's first 25 tokens outrank all of head 1: the cap stops it at 18
        raw0 = at::arange(tokens).lt(25).to(at::kFloat);
        raw1 = at::ones({tokens});
      }
      probs[0][0][0].narrow(0, 0, tokens).copy_(raw0);
      probs[0][3][0].narrow(0, 0, tokens).copy_(raw1);
      // Eq. 3 renormalises each row over the cached tokens.
      const at::Tensor head0 = raw0 / raw0.sum(0, true), head1 = raw1 / raw1.sum(0, true);
      const auto plan = policy.shrink(observe_one_layer(policy, probs, tokens), budget);
      QVERIFY(plan.has_value());
      // By hand: pairs in descending score, ties to the lower (head, token); at most
      // (m - tail) * 2 of them, each head at most budget - tail.
      const int64_t older = tokens - tail, pairs = (m - tail) * 2, cap = budget - tail;
      std::vector<std::pair<float, int64_t>> all;  // (score, head * older + token)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = 0; j < older; ++j)
          all.push_back({(h == 0 ? head0 : head1)[j].item<float>(), h * older + j});
      std::stable_sort(all.begin(), all.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<std::vector<int64_t>> want(2);
      int64_t taken = 0;
      for (const auto& [score, flat] : all) {
        if (taken == pairs) break;
        auto& list = want[static_cast<size_t>(flat / older)];
        if (static_cast<int64_t>(list.size()) == cap) continue;
        list.push_back(flat % older);
        ++taken;
      }
      for (auto& list : want) {
        std::sort(list.begin(), list.end());
        for (int64_t j = older; j < tokens; ++j)
          list.push_back(j);
      }
      QCOMPARE(plan->list(0, 0), want[0]);
      QCOMPARE(plan->list(0, 1), want[1]);
      if (dominated) QCOMPARE(static_cast<int64_t>(want[0].size()), cap + tail);
      // The scores follow their slots: each list right-aligned in the longest list's slots, the
      // empty ones before it at -inf (what a later shrink without a fresh patch ranks by).
      const auto n = static_cast<int64_t>(std::max(want[0].size(), want[1].size()));
      const at::Tensor kept = policy.layer_scores(0);
      QCOMPARE(kept.size(1), n);
      for (int64_t h = 0; h < 2; ++h) {
        const auto& list = want[static_cast<size_t>(h)];
        const int64_t pad = n - static_cast<int64_t>(list.size());
        for (int64_t j = 0; j < n; ++j) {
          const float got = kept[h][j].item<float>();
          if (j < pad) {
            QCOMPARE(got, -std::numeric_limits<float>::infinity());
            continue;
          }
          const float expect =
              (h == 0 ? head0 : head1)[list[static_cast<size_t>(j - pad)]].item<float>();
          QVERIFY(std::abs(got - expect) < 1e-7f);
        }
      }
    }
  }

  // Decoded tokens are appended to the episode cache: a fixed working set is shrunk only when
  // full (its budget + block), back to the budget less the slack; an unbounded one at its budget.
  void decodeShrinksOnlyAFullWorkingSet() {
    EpiCachePolicy policy;
    policy.set_budget(64);
    WorkingSetInfo ws;
    ws.layers = 2;
    ws.kv_heads = 2;
    ws.capacity = 96;
    ws.fixed_capacity = true;
    for (const int64_t tokens : {64, 80, 95}) {
      ws.tokens = tokens;
      QVERIFY2(!policy.before_decode_step(ws).has_value(), qPrintable(QString::number(tokens)));
    }
    ws.tokens = 96;
    const auto plan = policy.before_decode_step(ws);
    QVERIFY(plan.has_value());
    QCOMPARE(plan->kept(), int64_t{64 - policy.decode_slack()});
    ws.fixed_capacity = false;
    ws.tokens = 64;
    QVERIFY(policy.before_decode_step(ws).has_value());
  }

  // Texts embedded in one batch (padded after each end) give what each gives alone.
  void batchedEmbeddingsEqualOneAtATime() {
    const Decoder& d = models_.decoder("llama-gqa");
    QVERIFY(models_.model("llama-gqa").tokenizer != nullptr);
    const Tokenizer& tok = *models_.model("llama-gqa").tokenizer;
    const std::vector<std::string> texts{"User said, \"hi\"",
                                         "Assistant said, \"a much longer line "
                                         "about the garden and the rain\"",
                                         "x y z"};
    const std::vector<Embedding> batch = embed_texts(d, tok, texts);
    QCOMPARE(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const Embedding alone = embed_text(d, tok, texts[i]);
      QCOMPARE(batch[i].size(), alone.size());
      float worst = 0;
      for (size_t j = 0; j < alone.size(); ++j)
        worst = std::max(worst, std::abs(batch[i][j] - alone[j]));
      QVERIFY2(worst < 1e-5f, qPrintable(QString("text %1: %2").arg(i).arg(worst)));
    }
  }
};

QTEST_GUILESS_MAIN(EpiCacheTest)
#include "test_epicache.moc"
