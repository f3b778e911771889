// LouisKV's three kernels (gpu/key_kmeans.h, gpu/budgeted_select.h, gpu/row_gather.h) through
// their public entry points on the CPU, i.e. their reference bodies: spherical k-means assigns
// every key to its most similar centroid and never loses objective, the budgeted selection fills
// the budget with the best units (truncating the last one), the row gather copies exactly the
// chosen rows; bad shapes and rows are clear errors that write nothing. The CUDA bodies are
// compared with these on the device by engram-gpu-checks.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "gpu/budgeted_select.h"
#include "gpu/key_kmeans.h"
#include "gpu/page_gather.h"
#include "gpu/row_gather.h"
#include "gpu/side_worker.h"

using namespace engram;

namespace {

at::Tensor unit(const at::Tensor& x) {
  return x / x.norm(2, -1, true);
}

at::Tensor longs(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return at::tensor(v, at::kLong).view(shape).clone();
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().cpu();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// cos(key, centroid) in double, one head.
double cosine(const at::Tensor& key, const at::Tensor& centroid) {
  const at::Tensor a = key.to(at::kDouble), b = centroid.to(at::kDouble);
  const double na = a.norm().item<double>(), nb = b.norm().item<double>();
  return na == 0 ? 0 : a.dot(b).item<double>() / (na * nb);
}

// Sum over keys of cos(key, its cluster's centroid): what spherical k-means maximises.
double objective(const at::Tensor& keys, const at::Tensor& assignment,
                 const at::Tensor& centroids) {
  const at::Tensor k = unit(keys.to(at::kDouble));
  const at::Tensor chosen =
      centroids.to(at::kDouble).gather(1, assignment.unsqueeze(-1).expand({-1, -1, keys.size(2)}));
  return (k * chosen).sum().item<double>();
}

// Every (unit, token) of one head in the order the selection must take them: an independent
// statement of the contract (the reference sorts units and truncates).
std::vector<int64_t> expanded_selection(const std::vector<float>& score,
                                        const std::vector<int64_t>& size,
                                        const std::vector<int64_t>& offset, int64_t budget) {
  std::vector<std::tuple<float, int64_t, int64_t>> tokens;  // (-score, unit, token)
  for (size_t u = 0; u < score.size(); ++u)
    for (int64_t j = 0; j < size[u]; ++j)
      tokens.emplace_back(-score[u], static_cast<int64_t>(u), j);
  std::sort(tokens.begin(), tokens.end());
  std::vector<int64_t> rows(budget, -1);
  for (int64_t i = 0; i < budget && i < static_cast<int64_t>(tokens.size()); ++i)
    rows[i] = offset[std::get<1>(tokens[i])] + std::get<2>(tokens[i]);
  return rows;
}

}  // namespace

class LouisKvKernelsTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // The side worker that clusters beside the prefill (gpu/side_worker.h): works run in order and
  // see what the caller wrote before submitting; after a failure the rest is skipped and join()
  // rethrows it; nothing is submitted after join().
  void sideWorkerRunsInOrderAndRethrows() {
    std::vector<int64_t> seen;
    at::Tensor shared = at::zeros({4});
    {
      gpu::SideWorker worker(at::kCPU);
      for (int64_t i = 0; i < 4; ++i) {
        shared[i] = static_cast<double>(i + 1);
        worker.submit([&, i] { seen.push_back(shared[i].item<int64_t>()); });
      }
      worker.join();
      QCOMPARE(seen, (std::vector<int64_t>{1, 2, 3, 4}));
      QVERIFY_EXCEPTION_THROWN(worker.submit([] {}), std::logic_error);
    }
    gpu::SideWorker failing(at::kCPU);
    seen.clear();
    failing.submit([&] { seen.push_back(1); });
    failing.submit([] { throw std::runtime_error("no room"); });
    failing.submit([&] { seen.push_back(3); });
    QVERIFY_EXCEPTION_THROWN(failing.join(), std::runtime_error);
    QCOMPARE(seen, (std::vector<int64_t>{1}));
    {
      gpu::SideWorker unjoined(at::kCPU);  // its destructor waits for the work
      unjoined.submit([&] { seen.push_back(2); });
    }
    QCOMPARE(seen, (std::vector<int64_t>{1, 2}));
  }

  void assignmentIsTheBruteForceArgmax() {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      at::manual_seed(7);
      const at::Tensor keys = (at::randn({3, 200, 16}) * 3 + 0.5).to(dtype);
      const at::Tensor centroids = unit(at::randn({3, 9, 16}));
      const at::Tensor got = gpu::kmeans_assign(keys, centroids);
      QCOMPARE(got.sizes().vec(), (std::vector<int64_t>{3, 200}));
      QVERIFY(got.scalar_type() == at::kLong);
      int64_t compared = 0;
      for (int64_t h = 0; h < 3; ++h) {
        for (int64_t n = 0; n < 200; ++n) {
          std::vector<double> cos(9);
          for (int64_t k = 0; k < 9; ++k)
            cos[k] = cosine(keys[h][n].to(at::kFloat), centroids[h][k]);
          const int64_t best = std::max_element(cos.begin(), cos.end()) - cos.begin();
          std::vector<double> sorted = cos;
          std::sort(sorted.rbegin(), sorted.rend());
          if (sorted[0] - sorted[1] <= 1e-5) continue;  // a near-tie: either is right
          ++compared;
          QCOMPARE(got[h][n].item<int64_t>(), best);
        }
      }
      QVERIFY(compared > 590);
    }
  }

  void assignmentOfHandBuiltClusters() {
    // Head 0: centroids east, north, west. Head 1: the same, listed west, north, east.
    const at::Tensor east_north_west = at::tensor({1.f, 0.f, 0.f, 1.f, -1.f, 0.f}).view({3, 2});
    const at::Tensor centroids = at::stack({east_north_west, east_north_west.flip(0)});
    // Keys: clearly east, clearly north, clearly west, zero, the east/north diagonal (a tie),
    // the north/west diagonal (a tie).
    const at::Tensor head_keys =
        at::tensor({5.f, 1.f, 0.2f, 3.f, -4.f, -0.5f, 0.f, 0.f, 1.f, 1.f, -1.f, 1.f}).view({6, 2});
    const at::Tensor keys = at::stack({head_keys, head_keys});
    const at::Tensor got = gpu::kmeans_assign(keys, centroids);
    QCOMPARE(to_vector(got[0]), (std::vector<int64_t>{0, 1, 2, 0, 0, 1}));
    QCOMPARE(to_vector(got[1]), (std::vector<int64_t>{2, 1, 0, 0, 1, 0}));
  }

  void updateIsTheNormalisedMeanAndEmptyClustersStay() {
    const at::Tensor old = unit(at::tensor({1.f, 2.f, -3.f, 1.f, 2.f, 2.f}).view({1, 3, 2}));
    // Cluster 0: (3, 0) and (0, 4), whose unit vectors sum to (1, 1). Cluster 1: empty.
    // Cluster 2: (1, 0) and (-2, 0), whose unit vectors cancel.
    const at::Tensor keys = at::tensor({3.f, 0.f, 0.f, 4.f, 1.f, 0.f, -2.f, 0.f}).view({1, 4, 2});
    const at::Tensor assignment = longs({0, 0, 2, 2}, {1, 4});
    const at::Tensor got = gpu::kmeans_update(keys, assignment, old);
    QCOMPARE(got.sizes().vec(), old.sizes().vec());
    QVERIFY(got.scalar_type() == at::kFloat);
    const float r = 1.f / std::sqrt(2.f);
    QVERIFY(at::allclose(got[0][0], at::tensor({r, r}), 0, 1e-6));
    QVERIFY(at::equal(got[0][1], old[0][1]));
    QVERIFY(at::equal(got[0][2], old[0][2]));
  }

  void updateOfRandomClustersIsTheirMeanDirection() {
    at::manual_seed(3);
    const at::Tensor keys = at::randn({2, 300, 24}).to(at::kBFloat16);
    const at::Tensor old = unit(at::randn({2, 40, 24}));
    const at::Tensor assignment = at::randint(0, 35, {2, 300}, at::kLong);  // 35..39 empty
    const at::Tensor got = gpu::kmeans_update(keys, assignment, old);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t k = 0; k < 40; ++k) {
        at::Tensor sum = at::zeros({24}, at::kDouble);
        for (int64_t n = 0; n < 300; ++n)
          if (assignment[h][n].item<int64_t>() == k) sum += unit(keys[h][n].to(at::kDouble));
        if (sum.norm().item<double>() == 0) {
          QVERIFY(at::equal(got[h][k], old[h][k]));
          QVERIFY(k >= 35);
        } else {
          QVERIFY(at::allclose(got[h][k].to(at::kDouble), sum / sum.norm(), 0, 1e-6));
        }
      }
    }
  }

  void iterationsNeverLoseObjective() {
    at::manual_seed(11);
    // Keys around 6 directions per head, so that the clustering has something to find.
    const at::Tensor directions = unit(at::randn({2, 6, 8}));
    const at::Tensor which = at::randint(0, 6, {2, 500}, at::kLong);
    const at::Tensor keys = directions.gather(1, which.unsqueeze(-1).expand({-1, -1, 8})) +
                            0.4 * at::randn({2, 500, 8});
    at::Tensor centroids = unit(keys.narrow(1, 0, 6).clone());  // the first keys as seeds
    at::Tensor assignment = gpu::kmeans_assign(keys, centroids);
    double last = objective(keys, assignment, centroids);
    const double first = last;
    for (int step = 0; step < 10; ++step) {
      centroids = gpu::kmeans_update(keys, assignment, centroids);
      const double updated = objective(keys, assignment, centroids);
      QVERIFY2(updated >= last - 1e-4,
               qPrintable(QString("update %1: %2 < %3").arg(step).arg(updated).arg(last)));
      assignment = gpu::kmeans_assign(keys, centroids);
      last = objective(keys, assignment, centroids);
      QVERIFY2(last >= updated - 1e-4,
               qPrintable(QString("assign %1: %2 < %3").arg(step).arg(last).arg(updated)));
    }
    QVERIFY(last > first + 1);  // it did cluster
    QVERIFY(at::allclose(centroids.norm(2, -1), at::ones({2, 6}), 0, 1e-5));
  }

  void kmeansRejectsBadShapesAndClusters() {
    const at::Tensor keys = at::randn({2, 5, 4});
    const at::Tensor centroids = unit(at::randn({2, 3, 4}));
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_assign(keys, centroids.narrow(2, 0, 3)),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_assign(keys, centroids.narrow(0, 0, 1)),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_assign(keys[0], centroids), std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_assign(keys, centroids.to(at::kDouble)),
                             std::invalid_argument);
    const at::Tensor assignment = at::zeros({2, 5}, at::kLong);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_update(keys, assignment.to(at::kInt), centroids),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_update(keys, assignment.narrow(1, 0, 4), centroids),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_update(keys, assignment + 3, centroids),
                             std::out_of_range);
    QVERIFY_EXCEPTION_THROWN(gpu::kmeans_update(keys, assignment - 1, centroids),
                             std::out_of_range);
  }

  void selectionTruncatesTheLastUnit() {
    const at::Tensor rows =
        gpu::budgeted_select_rows(at::tensor({0.9f, 0.5f, 0.7f}).view({1, 3}),
                                  longs({3, 4, 2}, {1, 3}), longs({0, 10, 20}, {1, 3}), 6);
    QCOMPARE(rows.sizes().vec(), (std::vector<int64_t>{1, 6}));
    QCOMPARE(to_vector(rows), (std::vector<int64_t>{0, 1, 2, 20, 21, 10}));
  }

  void selectionTiesGoToTheLowerUnit() {
    const at::Tensor rows = gpu::budgeted_select_rows(
        at::tensor({0.5f, 0.8f, 0.8f, 0.5f}).view({1, 4}), longs({1, 2, 2, 1}, {1, 4}),
        longs({100, 200, 300, 400}, {1, 4}), 6);
    QCOMPARE(to_vector(rows), (std::vector<int64_t>{200, 201, 300, 301, 100, 400}));
  }

  void selectionSkipsEmptyUnitsAndPadsPastTheUnits() {
    // Head 0: the empty unit scores highest. Head 1: the units hold 3 tokens of a budget of 5.
    const at::Tensor scores = at::tensor({0.8f, 1.f, 0.7f, 0.1f, 0.3f, 0.2f}).view({2, 3});
    const at::Tensor sizes = longs({2, 0, 2, 1, 2, 0}, {2, 3});
    const at::Tensor offsets = longs({0, 50, 60, 7, 9, 11}, {2, 3});
    const at::Tensor rows = gpu::budgeted_select_rows(scores, sizes, offsets, 5);
    QCOMPARE(to_vector(rows[0]), (std::vector<int64_t>{0, 1, 60, 61, -1}));
    QCOMPARE(to_vector(rows[1]), (std::vector<int64_t>{9, 10, 7, -1, -1}));
    const at::Tensor none = gpu::budgeted_select_rows(scores, sizes, offsets, 0);
    QCOMPARE(none.sizes().vec(), (std::vector<int64_t>{2, 0}));
    const at::Tensor no_units = gpu::budgeted_select_rows(
        at::empty({2, 0}), at::empty({2, 0}, at::kLong), at::empty({2, 0}, at::kLong), 3);
    QCOMPARE(to_vector(no_units), (std::vector<int64_t>(6, -1)));
  }

  void selectionOfRandomUnitsTakesTheBestTokens() {
    for (int64_t units : {1, 7, 64, 300}) {
      at::manual_seed(units);
      // Scores from few values, so that ties are common.
      const at::Tensor scores = at::randint(0, 5, {3, units}).to(at::kFloat);
      const at::Tensor sizes = at::randint(0, 9, {3, units}, at::kLong);
      const at::Tensor offsets = at::randint(0, 10000, {3, units}, at::kLong);
      const int64_t total = sizes.sum().item<int64_t>();
      for (int64_t budget : {int64_t{1}, total / 6, total / 3 + 1, total + 5}) {
        const at::Tensor rows = gpu::budgeted_select_rows(scores, sizes, offsets, budget);
        for (int64_t h = 0; h < 3; ++h) {
          const at::Tensor s = scores[h].contiguous();
          const std::vector<float> score(s.data_ptr<float>(), s.data_ptr<float>() + units);
          QCOMPARE(to_vector(rows[h]),
                   expanded_selection(score, to_vector(sizes[h]), to_vector(offsets[h]), budget));
        }
      }
    }
  }

  void selectionRejectsBadInput() {
    const at::Tensor scores = at::rand({2, 4});
    const at::Tensor sizes = at::ones({2, 4}, at::kLong), offsets = at::zeros({2, 4}, at::kLong);
    QVERIFY_EXCEPTION_THROWN(gpu::budgeted_select_rows(scores, sizes, offsets, -1),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::budgeted_select_rows(scores, sizes.narrow(1, 0, 3), offsets, 2),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::budgeted_select_rows(scores, sizes.to(at::kInt), offsets, 2),
                             std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::budgeted_select_rows(scores[0], sizes[0], offsets[0], 2),
                             std::invalid_argument);
  }

  // The pool in pages: row r of a head is row r % P of page table[r / P] of the layer.
  void gatherCopiesTheChosenRowsOnly() {
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      at::manual_seed(5);
      const at::Tensor slab = at::randn({4, 2, 2, 2, 4, 6}).to(dtype);  // [pages, L, 2, H, P, d]
      const at::Tensor table = longs({2, 0, 3}, {3});                   // rows 0..11
      // The destinations are views of wider buffers (rows 1..7 of 9), as a working set's layer is.
      at::Tensor kbuf = at::full({2, 9, 6}, 7.f, dtype), vbuf = at::full({2, 9, 6}, 7.f, dtype);
      at::Tensor keys = kbuf.narrow(1, 1, 7), values = vbuf.narrow(1, 1, 7);
      const at::Tensor rows = longs({9, 0, -1, 3, 12, -1, 2, 4, 11, -1}, {2, 5});
      gpu::gather_paged_rows(keys, values, slab, 1, table, rows);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t j = 0; j < 7; ++j) {
          const int64_t row = j < 5 ? rows[h][j].item<int64_t>() : -1;
          for (int64_t kv = 0; kv < 2; ++kv) {
            const at::Tensor expected =
                row >= 0 && row < 12
                    ? slab[table[row / 4].item<int64_t>()][1][kv][h][row % 4]
                    : at::full({6}, 7.f, dtype);  // none, or past the table: untouched
            QVERIFY2(at::equal((kv == 0 ? keys : values)[h][j], expected),
                     qPrintable(QString("head %1 slot %2 kv %3").arg(h).arg(j).arg(kv)));
          }
        }
        QVERIFY(at::equal(kbuf[h][0], at::full({6}, 7.f, dtype)));
        QVERIFY(at::equal(vbuf[h][8], at::full({6}, 7.f, dtype)));
      }
    }
  }

  void gatherRejectsBadTablesAndShapesWritingNothing() {
    const at::Tensor slab = at::randn({3, 1, 2, 2, 4, 4});
    at::Tensor keys = at::zeros({2, 6, 4}), values = at::zeros({2, 6, 4});
    const at::Tensor good = longs({0, 1, 2, 3, 4, 5}, {2, 3});
    QVERIFY_EXCEPTION_THROWN(
        gpu::gather_paged_rows(keys, values, slab, 0, longs({0, 3}, {2}), good), std::out_of_range);
    QVERIFY(at::equal(keys, at::zeros({2, 6, 4})));  // a bad page anywhere: nothing written
    at::Tensor narrow = at::zeros({2, 6, 3});
    QVERIFY_EXCEPTION_THROWN(gpu::gather_paged_rows(narrow, narrow, slab, 0, longs({0}, {1}), good),
                             std::invalid_argument);
    at::Tensor short_dst = at::zeros({2, 2, 4});
    QVERIFY_EXCEPTION_THROWN(
        gpu::gather_paged_rows(short_dst, short_dst, slab, 0, longs({0}, {1}), good),
        std::invalid_argument);
    at::Tensor doubles = at::zeros({2, 6, 4}, at::kDouble);
    QVERIFY_EXCEPTION_THROWN(
        gpu::gather_paged_rows(doubles, doubles, slab, 0, longs({0}, {1}), good),
        std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(
        gpu::gather_paged_rows(keys, values, slab, 0, longs({0}, {1}), good.to(at::kInt)),
        std::invalid_argument);
    QVERIFY_EXCEPTION_THROWN(gpu::gather_paged_rows(keys, values, slab, 1, longs({0}, {1}), good),
                             std::invalid_argument);
    QVERIFY(at::equal(keys, at::zeros({2, 6, 4})));
  }

  // Rows appended to a partly filled page (a decode segment offloaded after the prompt's rows)
  // land where the paged gather reads them.
  void scatterFromARowInsideAPageFeedsTheGather() {
    at::Tensor slab = at::zeros({3, 2, 2, 2, 4, 6});
    const at::Tensor keys = at::randn({2, 10, 6}), values = at::randn({2, 10, 6});
    // Rows 6..10 of layer 1 from slots 2..6, pages of 4 rows, table {2, 1, 0}: rows 6..7 are
    // rows 2..3 of slab page 1, rows 8..10 rows 0..2 of slab page 0.
    const at::Tensor table = longs({2, 1, 0}, {3});
    const at::Tensor entries = longs({1, 0, 2, 4, 2, 3, 2, 0}, {4, 2});
    gpu::scatter_pages(slab, 1, keys, values, entries[0], entries[1], entries[2], entries[3]);
    at::Tensor k = at::zeros({2, 5, 6}), v = at::zeros({2, 5, 6});
    const at::Tensor rows = longs({6, 7, 8, 9, 10, 6, 7, 8, 9, 10}, {2, 5});
    gpu::gather_paged_rows(k, v, slab, 1, table, rows);
    QVERIFY(at::equal(k, keys.narrow(1, 2, 5)));
    QVERIFY(at::equal(v, values.narrow(1, 2, 5)));
    QVERIFY(at::equal(slab.select(1, 0), at::zeros_like(slab.select(1, 0))));  // other layer
  }
};

QTEST_APPLESS_MAIN(LouisKvKernelsTest)
#include "test_louiskv_kernels.moc"
