// Attention against a plain reference (heads repeated, softmax of masked scores) over a grid of
// shapes: GQA ratios, head dims, odd lengths, dense causal, ragged positions and a sliding window.
#include <QtTest>

#include <cmath>

#include "core/runtime/attention.h"

using namespace engram;

namespace {

at::Tensor reference_probs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask) {
  const int64_t g = q.size(1) / k.size(1);
  at::Tensor ke = k.repeat_interleave(g, 1);
  at::Tensor scores = at::matmul(q, ke.transpose(-1, -2)) / std::sqrt(double(q.size(3)));
  scores.masked_fill_(mask.logical_not(), -INFINITY);
  return at::softmax(scores, -1);
}

at::Tensor positions_matrix(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows)
    flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat, at::kLong).view({static_cast<int64_t>(rows.size()), -1});
}

}  // namespace

class AttentionTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matchesReferenceOverShapes_data() {
    QTest::addColumn<int>("hq");
    QTest::addColumn<int>("hkv");
    QTest::addColumn<int>("d");
    QTest::addColumn<int>("s");
    QTest::addColumn<int>("t");
    QTest::newRow("mha d8 s5") << 4 << 4 << 8 << 5 << 5;
    QTest::newRow("gqa2 d16 s7 t19") << 4 << 2 << 16 << 7 << 19;
    QTest::newRow("gqa4 d32 s1 t33") << 8 << 2 << 32 << 1 << 33;
    QTest::newRow("gqa7 d64 s13") << 14 << 2 << 64 << 13 << 13;
    QTest::newRow("mqa d16 s3 t11") << 4 << 1 << 16 << 3 << 11;
  }

  // Dense causal keys (positions 0..T-1, queries the last S): the fast paths must equal the
  // masked reference.
  void matchesReferenceOverShapes() {
    QFETCH(int, hq);
    QFETCH(int, hkv);
    QFETCH(int, d);
    QFETCH(int, s);
    QFETCH(int, t);
    at::manual_seed(hq * 100 + t);
    const int64_t b = 2;
    at::Tensor q = at::randn({b, hq, s, d});
    AttendKv kv;
    kv.keys = at::randn({b, hkv, t, d});
    kv.values = at::randn({b, hkv, t, d});
    kv.key_positions = at::arange(t, at::kLong).unsqueeze(0).expand({b, t}).contiguous();
    kv.dense_causal = true;
    at::Tensor qpos = at::arange(t - s, t, at::kLong).unsqueeze(0).expand({b, s}).contiguous();
    const at::Tensor mask = position_mask(qpos, kv.key_positions, std::nullopt);
    const at::Tensor probs = reference_probs(q, kv.keys, mask);
    const at::Tensor expected = at::matmul(probs, kv.values.repeat_interleave(hq / hkv, 1));
    QVERIFY(at::allclose(attention(q, kv, qpos, std::nullopt), expected, 1e-5, 1e-5));
    kv.dense_causal = false;  // the explicit-mask path gives the same answer
    QVERIFY(at::allclose(attention(q, kv, qpos, std::nullopt), expected, 1e-5, 1e-5));
    // Probabilities of a few rows equal the reference rows.
    const std::vector<int64_t> rows =
        s > 1 ? std::vector<int64_t>{s - 1, 0} : std::vector<int64_t>{0};
    const at::Tensor idx = at::tensor(rows, at::kLong);
    const at::Tensor p = attention_probabilities(q.index_select(2, idx), kv,
                                                 qpos.index_select(1, idx), std::nullopt);
    QVERIFY(at::allclose(p, probs.index_select(2, idx), 1e-5, 1e-6));
  }

  // Keys in arbitrary order with empty slots (-1) and rows of different lengths.
  void raggedPositionsMaskExactly() {
    at::manual_seed(3);
    at::Tensor q = at::randn({2, 4, 2, 16});
    AttendKv kv;
    kv.keys = at::randn({2, 2, 6, 16});
    kv.values = at::randn({2, 2, 6, 16});
    kv.key_positions = positions_matrix({{0, 1, 2, 3, 4, 5}, {3, 0, 1, 2, -1, -1}});
    const at::Tensor qpos = positions_matrix({{4, 5}, {2, 3}});
    const at::Tensor mask = position_mask(qpos, kv.key_positions, std::nullopt);
    QCOMPARE(mask[1][0][0].to(at::kLong).sum().item<int64_t>(), 3);  // sees 0, 1, 2
    QCOMPARE(mask[1][0][1].to(at::kLong).sum().item<int64_t>(), 4);  // sees 3 (slot 0) too
    const at::Tensor expected =
        at::matmul(reference_probs(q, kv.keys, mask), kv.values.repeat_interleave(2, 1));
    QVERIFY(at::allclose(attention(q, kv, qpos, std::nullopt), expected, 1e-5, 1e-5));
  }

  void slidingWindowLimitsTheKeys() {
    const at::Tensor kpos = at::arange(10, at::kLong).unsqueeze(0);
    const at::Tensor qpos = at::tensor(std::vector<int64_t>{9}, at::kLong).unsqueeze(0);
    const at::Tensor mask = position_mask(qpos, kpos, 4);
    QCOMPARE(mask.to(at::kLong).sum().item<int64_t>(), 4);  // positions 6..9
    QVERIFY(mask[0][0][0][6].item<bool>());
    QVERIFY(!mask[0][0][0][5].item<bool>());
  }
};

QTEST_GUILESS_MAIN(AttentionTest)
#include "test_attention.moc"
