// Sampling: greedy is argmax, a seed gives identical output, top-k/top-p restrict the support,
// the repetition penalty is transformers' CTRL rule, and bad settings are refused.
#include <QtTest>

#include <set>

#include "core/runtime/sampler.h"

using namespace engram;

class SamplerTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void greedyPicksTheArgmax() {
    Sampler s({});
    const at::Tensor logits = at::tensor(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f});
    QCOMPARE(s.next(logits, {}), int64_t{1});
  }

  // Ids past the tokenizer (a padded embedding) are never chosen, greedy or sampled.
  void vocabLimitExcludesRowsPastTheTokenizer() {
    const at::Tensor logits = at::tensor(std::vector<float>{0.1f, 2.0f, -1.0f, 9.0f, 8.0f});
    SamplingOptions greedy;
    greedy.vocab_limit = 3;
    QCOMPARE(Sampler(greedy).next(logits, {}), int64_t{1});
    SamplingOptions hot = greedy;
    hot.temperature = 5.0;
    hot.seed = 7;
    Sampler s(hot);
    for (int i = 0; i < 200; ++i)
      QVERIFY(s.next(logits, {}) < 3);
    QCOMPARE(Sampler({}).next(logits, {}), int64_t{3});  // no limit: every row
  }

  void sameSeedSameTokens() {
    at::manual_seed(0);
    const at::Tensor logits = at::randn({64});
    SamplingOptions o;
    o.temperature = 1.0;
    o.seed = 1234;
    Sampler a(o), b(o);
    std::vector<int64_t> ta, tb;
    for (int i = 0; i < 50; ++i) {
      ta.push_back(a.next(logits, {}));
      tb.push_back(b.next(logits, {}));
    }
    QCOMPARE(ta, tb);
    o.seed = 99;
    Sampler c(o);
    std::vector<int64_t> tc;
    for (int i = 0; i < 50; ++i)
      tc.push_back(c.next(logits, {}));
    QVERIFY(ta != tc);
  }

  void topKKeepsOnlyTheKBest() {
    const at::Tensor logits = at::tensor(std::vector<float>{5, 4, 3, 2, 1, 0});
    SamplingOptions o;
    o.temperature = 5.0;  // flat enough that every token would appear without top-k
    o.top_k = 2;
    Sampler s(o);
    std::set<int64_t> seen;
    for (int i = 0; i < 200; ++i)
      seen.insert(s.next(logits, {}));
    QCOMPARE(seen, (std::set<int64_t>{0, 1}));
  }

  void topPKeepsTheSmallestNucleus() {
    // Probabilities ~0.64, 0.24, 0.09, 0.03: top-p 0.8 keeps the first two.
    const at::Tensor logits = at::tensor(std::vector<float>{3, 2, 1, 0}).log_softmax(0);
    SamplingOptions o;
    o.temperature = 1.0;
    o.top_p = 0.8;
    Sampler s(o);
    std::set<int64_t> seen;
    for (int i = 0; i < 300; ++i)
      seen.insert(s.next(logits, {}));
    QCOMPARE(seen, (std::set<int64_t>{0, 1}));
  }

  void repetitionPenaltyDividesPositiveAndMultipliesNegative() {
    SamplingOptions o;
    o.repetition_penalty = 2.0;
    Sampler s(o);
    // Token 0 (3.0) was seen: 1.5 < token 1's 2.0.
    QCOMPARE(s.next(at::tensor(std::vector<float>{3.0f, 2.0f}), {0}), int64_t{1});
    // Token 1 (-0.5) was seen: -1.0 < token 0's -0.9.
    QCOMPARE(s.next(at::tensor(std::vector<float>{-0.9f, -0.5f}), {1}), int64_t{0});
  }

  void badSettingsAreRefused() {
    SamplingOptions o;
    o.top_p = 0;
    QVERIFY_EXCEPTION_THROWN(Sampler{o}, std::invalid_argument);
    o = {};
    o.temperature = -1;
    QVERIFY_EXCEPTION_THROWN(Sampler{o}, std::invalid_argument);
    o = {};
    o.repetition_penalty = 0;
    QVERIFY_EXCEPTION_THROWN(Sampler{o}, std::invalid_argument);
  }
};

QTEST_GUILESS_MAIN(SamplerTest)
#include "test_sampler.moc"
