// Attention against a plain reference (heads repeated, softmax of masked scores) over a grid of
// shapes: GQA ratios, head dims, odd lengths, dense causal, ragged positions and a sliding window.
#include <QtTest>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "core/runtime/attention.h"
#include "gpu/decode_attention.h"

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

  // An assembled prompt's recomputed rows: queries at sorted positions (runs, a lone row, the
  // last row) over keys 0..T-1. Run by run equals one masked call, and the caller's kv.mask
  // (kept across layers) equals the mask built from positions.
  void runsOfRowsEqualTheMaskedCall() {
    at::manual_seed(11);
    const std::vector<int64_t> rows{3, 4, 5, 9, 14, 15, 16, 17, 23};
    const int64_t t = 24, hq = 6, hkv = 2, d = 16;
    const auto r = static_cast<int64_t>(rows.size());
    const std::vector<QueryRun> runs = query_runs(rows);
    QCOMPARE(runs.size(), size_t{4});
    QCOMPARE(runs[2].first, int64_t{4});
    QCOMPARE(runs[2].count, int64_t{4});
    QCOMPARE(runs[2].end, int64_t{18});
    at::Tensor q = at::randn({1, hq, r, d});
    AttendKv kv;
    kv.keys = at::randn({1, hkv, t, d});
    kv.values = at::randn({1, hkv, t, d});
    kv.key_positions = at::arange(t, at::kLong).unsqueeze(0);
    const at::Tensor qpos = at::tensor(rows, at::kLong).unsqueeze(0);
    const at::Tensor mask = position_mask(qpos, kv.key_positions, std::nullopt);
    const at::Tensor expected =
        at::matmul(reference_probs(q, kv.keys, mask), kv.values.repeat_interleave(hq / hkv, 1));
    QVERIFY(at::allclose(attention_by_runs(q, kv, qpos, runs, std::nullopt), expected, 1e-5, 1e-5));
    kv.mask = mask;
    QVERIFY(at::allclose(attention(q, kv, qpos, std::nullopt), expected, 1e-5, 1e-5));
    // Compute-dtype scores: f32 here, so the same probabilities.
    QVERIFY(at::allclose(attention_probabilities(q, kv, qpos, std::nullopt, false),
                         reference_probs(q, kv.keys, mask), 1e-5, 1e-6));
  }

  void slidingWindowLimitsTheKeys() {
    const at::Tensor kpos = at::arange(10, at::kLong).unsqueeze(0);
    const at::Tensor qpos = at::tensor(std::vector<int64_t>{9}, at::kLong).unsqueeze(0);
    const at::Tensor mask = position_mask(qpos, kpos, 4);
    QCOMPARE(mask.to(at::kLong).sum().item<int64_t>(), 4);  // positions 6..9
    QVERIFY(mask[0][0][0][6].item<bool>());
    QVERIFY(!mask[0][0][0][5].item<bool>());
  }

  // The decode kernel's contract (gpu/decode_attention.h) on its reference body, against a loop
  // in double: grouped heads, holes (-1), a sliding window, per-head valid slots, slots past a
  // row's newest one unread (they hold NaN here), a row that sees nothing gets zeros.
  void decodeAttentionMatchesALoop_data() {
    QTest::addColumn<int>("window");
    QTest::addColumn<bool>("ragged");
    QTest::newRow("positions") << 0 << false;
    QTest::newRow("window 7") << 7 << false;
    QTest::newRow("per-head valid") << 0 << true;
  }
  void decodeAttentionMatchesALoop() {
    QFETCH(int, window);
    QFETCH(bool, ragged);
    at::manual_seed(11 + window);
    const int64_t rows = 3, hq = 6, hkv = 2, g = 3, d = 16, slots = 40;
    const at::Tensor q = at::randn({rows, hq, d});
    const at::Tensor keys = at::randn({rows, hkv, slots, d});
    const at::Tensor values = at::randn({rows, hkv, slots, d});
    at::Tensor kpos = at::arange(slots, at::kLong).unsqueeze(0).repeat({rows, 1});
    kpos[0].narrow(0, 5, 3).fill_(-1);         // holes
    kpos[1] = at::randperm(slots, at::kLong);  // any order
    kpos[2].fill_(-1);                         // sees nothing
    const std::vector<int64_t> last{25, 39, 39};
    const at::Tensor last_slots = at::tensor(last, at::kLong);
    const at::Tensor positions = at::tensor(std::vector<int64_t>{25, 30, 39}, at::kLong);
    for (int64_t r = 0; r < rows; ++r) {  // what a step never wrote
      keys[r].narrow(1, last[r] + 1, slots - 1 - last[r]).fill_(NAN);
      values[r].narrow(1, last[r] + 1, slots - 1 - last[r]).fill_(NAN);
    }
    at::Tensor valid;
    if (ragged) valid = at::rand({rows, hkv, slots}).gt(0.3);
    const double scale = 0.25;
    const at::Tensor out =
        gpu::decode_attention(q, keys, values, kpos, valid, positions, last_slots, window, scale);
    QCOMPARE(out.sizes(), q.sizes());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = positions[r].item<int64_t>();
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t kh = h / g;
        std::vector<double> w(slots, 0.0);
        double m = -INFINITY;
        for (int64_t j = 0; j <= last[r]; ++j) {
          const int64_t kp = kpos[r][j].item<int64_t>();
          bool seen = kp >= 0 && kp <= pos && (window == 0 || kp > pos - window);
          if (valid.defined()) seen = seen && valid[r][kh][j].item<bool>();
          if (!seen) continue;
          w[j] = scale *
                 (q[r][h].to(at::kDouble) * keys[r][kh][j].to(at::kDouble)).sum().item<double>();
          m = std::max(m, w[j]);
        }
        at::Tensor expected = at::zeros({d}, at::kDouble);
        double l = 0;
        for (int64_t j = 0; j <= last[r] && m > -INFINITY; ++j) {
          const int64_t kp = kpos[r][j].item<int64_t>();
          bool seen = kp >= 0 && kp <= pos && (window == 0 || kp > pos - window);
          if (valid.defined()) seen = seen && valid[r][kh][j].item<bool>();
          if (!seen) continue;
          const double e = std::exp(w[j] - m);
          l += e;
          expected += e * values[r][kh][j].to(at::kDouble);
        }
        if (l > 0) expected /= l;
        QVERIFY2(at::allclose(out[r][h].to(at::kDouble), expected, 1e-5, 1e-5),
                 qPrintable(QString("row %1 head %2").arg(r).arg(h)));
      }
    }
    QVERIFY(out[2].abs().sum().item<double>() == 0);  // row 2 saw nothing
    // Without positions every slot up to the newest is seen: plain softmax attention.
    const at::Tensor dense = gpu::decode_attention(
        q.narrow(0, 1, 1), keys.narrow(0, 1, 1), values.narrow(0, 1, 1), at::Tensor(), at::Tensor(),
        positions.narrow(0, 1, 1), last_slots.narrow(0, 1, 1), 0, scale);
    const at::Tensor probs =
        at::softmax(at::matmul(q[1].view({hkv, g, d}), keys[1].transpose(1, 2)) * scale, -1);
    QVERIFY(at::allclose(dense[0], at::matmul(probs, values[1]).view({hq, d}), 1e-5, 1e-5));
  }

  void decodeAttentionRejectsBadShapes() {
    const at::Tensor q = at::randn({1, 4, 8}), kv = at::randn({1, 2, 5, 8});
    const at::Tensor pos = at::zeros({1}, at::kLong);
    QVERIFY_EXCEPTION_THROWN(
        gpu::decode_attention(q, at::randn({1, 3, 5, 8}), at::randn({1, 3, 5, 8}), at::Tensor(),
                              at::Tensor(), pos, pos, 0, 1.0),
        std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::decode_attention(q, kv, kv, at::zeros({1, 4}, at::kLong),
                                                   at::Tensor(), pos, pos, 0, 1.0),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::decode_attention(q, kv, kv.to(at::kDouble), at::Tensor(),
                                                   at::Tensor(), pos, pos, 0, 1.0),
                             std::invalid_argument);
  }
};

QTEST_GUILESS_MAIN(AttentionTest)
#include "test_attention.moc"
