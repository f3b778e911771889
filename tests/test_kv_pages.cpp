// The paged pool (core/kv/kv_page_pool.h, kv_unit_pool.h): a unit moved between the device, the
// pinned pool and the spill file reads back bit for bit; a full tier or a damaged spill file is a
// clear error that leaves the unit whole; units loaded into a working set layer by layer on the
// copy lane give the logits of the cache they were taken from, once, with one kv_copy interval
// per layer in the trace.
#include <QtTest>

#include <filesystem>

#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/kv_unit_pool.h"
#include "core/trace/engine_observer.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_timeline.h"
#include "gpu/page_gather.h"
#include "support/collected_intervals.h"
#include "support/reference_fixture.h"

using namespace engram;

namespace {

using Collect = test::CollectedIntervals;
using test::iota;

std::vector<int64_t> ids(int64_t n, int64_t salt) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = 3 + (i * 7919 + salt * 104729) % 900;
  return v;
}

// [layers, 2, kv_heads, n, head_dim] of slots [begin, begin + n) of row 0.
at::Tensor unit_kv(const KvCache& cache, int64_t begin, int64_t n) {
  std::vector<at::Tensor> layers;
  for (int64_t l = 0; l < cache.shape().layers; ++l) {
    layers.push_back(
        at::stack({cache.keys(l)[0].narrow(1, begin, n), cache.values(l)[0].narrow(1, begin, n)}));
  }
  return at::stack(layers);
}

}  // namespace

class KvPagesTest : public QObject {
  Q_OBJECT

  LoadedModel model_;
  QTemporaryDir dir_;

  KvCacheShape shape() const {
    const auto& c = model_.config;
    return {c.num_layers, c.num_kv_heads, c.head_dim};
  }
  at::Tensor forward(KvSource& source, std::vector<int64_t> tokens, std::vector<int64_t> positions,
                     gpu::DeviceTimeline& timeline, TraceRecorder* trace = nullptr) {
    ForwardRequest req;
    req.tokens = {std::move(tokens)};
    req.positions = {std::move(positions)};
    req.all_logits = true;
    return model_.decoder->forward(req, source, timeline, trace).logits;
  }
  KvPagePoolOptions options(int64_t device_pages, int64_t pinned_pages) const {
    KvPagePoolOptions o;
    o.page_tokens = 16;
    o.device_pages = device_pages;
    o.pinned_pages = pinned_pages;
    o.spill_dir = dir_.path().toStdString();
    return o;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    model_ = load_model({test::fixture_model("llama-gqa"), "", 0}, choose_device("cpu", "f32"), {});
  }

  void unitMovesBetweenTiersBitForBit() {
    std::filesystem::path spill;
    {
      KvPagePool pages(shape(), at::kFloat, at::kCPU, options(8, 8));
      KvUnitPool units(pages);
      const auto s = shape();
      const at::Tensor kv = at::randn({s.layers, 2, s.kv_heads, 37, s.head_dim});
      const int64_t id = units.add("turn", 100, kv, iota(5, 37), PageTier::kDevice);
      QCOMPARE(units.unit(id).pages.size(), size_t{3});  // 16 + 16 + 5 tokens
      QCOMPARE(pages.in_use(PageTier::kDevice), int64_t{3});
      for (PageTier tier : {PageTier::kPinned, PageTier::kDisk, PageTier::kPinned,
                            PageTier::kDevice, PageTier::kDisk}) {
        units.move(id, tier);
        QVERIFY(units.unit(id).tier() == tier);
        QVERIFY(at::equal(units.read(id), kv));
        QCOMPARE(units.tokens_in(tier), int64_t{37});
      }
      QCOMPARE(pages.in_use(PageTier::kDevice), int64_t{0});
      QCOMPARE(pages.in_use(PageTier::kPinned), int64_t{0});
      QCOMPARE(pages.in_use(PageTier::kDisk), int64_t{3});
      spill = pages.spill_file();
      QVERIFY(std::filesystem::exists(spill));
      units.remove(id);
      QCOMPARE(pages.in_use(PageTier::kDisk), int64_t{0});
      QVERIFY_EXCEPTION_THROWN(units.unit(id), std::out_of_range);
    }
    QVERIFY(!std::filesystem::exists(spill));  // scratch: gone with the pool
  }

  void fullTierAndDamagedSpillAreClearErrors() {
    KvPagePool pages(shape(), at::kFloat, at::kCPU, options(2, 1));
    KvUnitPool units(pages);
    const auto s = shape();
    const at::Tensor kv = at::randn({s.layers, 2, s.kv_heads, 20, s.head_dim});
    const int64_t id = units.add("segment", -1, kv, iota(0, 20), PageTier::kDevice);
    try {
      units.move(id, PageTier::kPinned);  // two pages, one free
      QFAIL("moving into a full tier must throw");
    } catch (const std::runtime_error& e) {
      QVERIFY2(std::string(e.what()).find("pinned KV page pool is full") != std::string::npos,
               e.what());
    }
    QVERIFY(units.unit(id).tier() == PageTier::kDevice);
    QCOMPARE(pages.in_use(PageTier::kPinned), int64_t{0});
    QVERIFY(at::equal(units.read(id), kv));
    QVERIFY_EXCEPTION_THROWN(units.add("x", -1, kv, iota(0, 20), PageTier::kDevice),
                             std::runtime_error);
    QCOMPARE(pages.in_use(PageTier::kDevice), int64_t{2});
    QVERIFY_EXCEPTION_THROWN(units.add("x", -1, kv, iota(0, 19), PageTier::kDisk),
                             std::invalid_argument);

    units.move(id, PageTier::kDisk);
    std::filesystem::resize_file(pages.spill_file(), pages.page_bytes() / 2);
    try {
      units.read(id);
      QFAIL("reading a truncated spill file must throw");
    } catch (const std::runtime_error& e) {
      QVERIFY2(std::string(e.what()).find(pages.spill_file().string()) != std::string::npos,
               e.what());
    }
  }

  // Two units taken from a prefilled cache, sent to disk and brought back to the pinned pool,
  // are loaded into an empty cache during the forward of the next tokens: the logits are those
  // of the cache they came from, the copies run once, one kv_copy interval per layer.
  void loadedUnitsGiveTheLogitsOfTheirCache() {
    const int64_t p = 45, s = 6;
    const auto tokens = ids(p + s, 4);
    const std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + p);
    const std::vector<int64_t> rest(tokens.begin() + p, tokens.end());
    gpu::DeviceTimeline timeline(at::kCPU);

    // The reference continues the cache the units are taken from.
    KvCache prefix_cache(shape(), 1, p + s + 1, at::kFloat, at::kCPU);
    CacheKvSource prefix_source(prefix_cache);
    forward(prefix_source, prefix, iota(0, p), timeline);
    KvPagePool pages(shape(), at::kFloat, at::kCPU, options(0, 8));
    KvUnitPool units(pages);
    const int64_t a =
        units.add("turn", 0, unit_kv(prefix_cache, 0, 20), iota(0, 20), PageTier::kDisk);
    const int64_t b =
        units.add("turn", 20, unit_kv(prefix_cache, 20, p - 20), iota(20, p - 20), PageTier::kDisk);
    units.move(a, PageTier::kPinned);
    KvCache working(shape(), 1, 8, at::kFloat, at::kCPU);
    const std::vector<int64_t> both{a, b};
    QVERIFY_EXCEPTION_THROWN(UnitLoadingKvSource(units, both, working), std::invalid_argument);
    units.move(b, PageTier::kPinned);
    const at::Tensor expected = forward(prefix_source, rest, iota(p, s), timeline);

    UnitLoadingKvSource source(units, {a, b}, working, /*prefetch_depth=*/2);
    Collect collect;
    TraceRecorder trace(timeline, &collect, 1);
    const at::Tensor got = forward(source, rest, iota(p, s), timeline, &trace);
    QVERIFY(at::equal(got, expected));
    QCOMPARE(source.loaded_tokens(), p);
    QCOMPARE(working.lengths()[0], p + s);
    QVERIFY(working.dense());
    trace.flush();
    int copies = 0;
    for (const auto& i : collect.intervals) {
      if (i.lane != TraceLane::kCopy) continue;
      ++copies;
      QCOMPARE(i.what, std::string("kv_copy"));
      QCOMPARE(i.tokens, p);
      // The 45 tokens' K and V of one layer (partly filled last pages copy only their tokens).
      QCOMPARE(i.bytes, p * pages.layer_block_bytes() / pages.page_tokens());
    }
    QCOMPARE(copies, static_cast<int>(shape().layers));

    // Loaded before the forward instead of during it: the same logits.
    KvCache early(shape(), 1, 8, at::kFloat, at::kCPU);
    UnitLoadingKvSource preload(units, both, early);
    preload.load_now(timeline);
    QCOMPARE(early.lengths()[0], p);
    QVERIFY(at::equal(forward(preload, rest, iota(p, s), timeline), expected));

    // The loaded units stay in the working set: the next step copies nothing.
    const int64_t bytes = source.copied_bytes();
    const at::Tensor step = forward(source, {42}, {p + s}, timeline);
    QCOMPARE(source.copied_bytes(), bytes);
    const at::Tensor next = forward(prefix_source, {42}, {p + s}, timeline);
    QVERIFY(at::equal(step[0][0], next[0][0]));
  }

  // The page gather (the loader's per-layer copy): only each page's tokens are written, next to
  // each other, and a table entry outside the slab or the working set is an error, not a write.
  void pageGatherCopiesOnlyEachPagesTokens() {
    const int64_t pages = 3, layers = 2, heads = 2, page = 4, dim = 8, capacity = 12;
    const at::Tensor slab = at::randn({pages, layers, 2, heads, page, dim});
    at::Tensor keys = at::full({heads, capacity, dim}, -7.0);
    at::Tensor values = at::full({heads, capacity, dim}, -7.0);
    const at::Tensor table = at::tensor({2, 0, 0, 5, 3, 4}, at::kLong).view({3, 2});
    gpu::gather_pages(keys, values, slab, 1, table[0], table[1], table[2]);
    // Page 2's first 3 tokens to slots 0..2, page 0's first 4 to slots 5..8.
    QVERIFY(at::equal(keys.narrow(1, 0, 3), slab[2][1][0].narrow(1, 0, 3)));
    QVERIFY(at::equal(values.narrow(1, 0, 3), slab[2][1][1].narrow(1, 0, 3)));
    QVERIFY(at::equal(keys.narrow(1, 5, 4), slab[0][1][0]));
    QVERIFY(at::equal(values.narrow(1, 5, 4), slab[0][1][1]));
    for (int64_t untouched : {3, 4, 9, 10, 11})
      QVERIFY(at::all(keys.select(1, untouched).eq(-7.0)).item<bool>());
    const at::Tensor past_end = at::tensor({0, 10, 4}, at::kLong).view({3, 1});
    QVERIFY_EXCEPTION_THROWN(
        gpu::gather_pages(keys, values, slab, 0, past_end[0], past_end[1], past_end[2]),
        std::out_of_range);
    const at::Tensor no_page = at::tensor({3, 0, 1}, at::kLong).view({3, 1});
    QVERIFY_EXCEPTION_THROWN(
        gpu::gather_pages(keys, values, slab, 0, no_page[0], no_page[1], no_page[2]),
        std::out_of_range);
    QVERIFY_EXCEPTION_THROWN(gpu::gather_pages(keys, values, slab, 2, table[0], table[1], table[2]),
                             std::invalid_argument);
  }

  // The inverse (an episode's write-back): only each page's first rows are written, the gather of
  // the same table brings them back, and a unit taken from a cache's slots equals the unit added
  // from the same slots stacked.
  void pageScatterIsTheGathersInverse() {
    const int64_t pages = 3, layers = 2, heads = 2, page = 4, dim = 8, capacity = 12;
    at::Tensor slab = at::full({pages, layers, 2, heads, page, dim}, -7.0);
    const at::Tensor keys = at::randn({heads, capacity, dim});
    const at::Tensor values = at::randn({heads, capacity, dim});
    const at::Tensor table = at::tensor({2, 0, 0, 5, 3, 4}, at::kLong).view({3, 2});
    gpu::scatter_pages(slab, 1, keys, values, table[0], table[1], table[2]);
    QVERIFY(at::equal(slab[2][1][0].narrow(1, 0, 3), keys.narrow(1, 0, 3)));
    QVERIFY(at::equal(slab[0][1][1], values.narrow(1, 5, 4)));
    QVERIFY(at::all(slab[2][1][0].select(1, 3).eq(-7.0)).item<bool>());  // past the count
    QVERIFY(at::all(slab.select(1, 0).eq(-7.0)).item<bool>());           // another layer
    at::Tensor k = at::zeros_like(keys), v = at::zeros_like(values);
    gpu::gather_pages(k, v, slab, 1, table[0], table[1], table[2]);
    QVERIFY(at::equal(k.narrow(1, 5, 4), keys.narrow(1, 5, 4)));
    QVERIFY(at::equal(v.narrow(1, 0, 3), values.narrow(1, 0, 3)));
    const at::Tensor past_end = at::tensor({0, 10, 4}, at::kLong).view({3, 1});
    QVERIFY_EXCEPTION_THROWN(
        gpu::scatter_pages(slab, 0, keys, values, past_end[0], past_end[1], past_end[2]),
        std::out_of_range);

    KvCache cache(shape(), 1, 64, at::kFloat, at::Device(at::kCPU));
    CacheKvSource source(cache);
    gpu::DeviceTimeline timeline(at::Device(at::kCPU));
    forward(source, ids(45, 3), iota(0, 45), timeline);
    KvPagePool pool(shape(), at::kFloat, at::Device(at::kCPU), options(0, 16));
    KvUnitPool units(pool);
    const int64_t taken = units.add_from_cache("episode", -1, cache, 7, 30, PageTier::kPinned);
    QCOMPARE(units.unit(taken).tokens, int64_t{30});
    QCOMPARE(units.unit(taken).positions, iota(7, 30));
    QVERIFY(at::equal(units.read(taken), unit_kv(cache, 7, 30)));
    const int64_t copy = units.clone(taken, PageTier::kDisk);
    QVERIFY(at::equal(units.read(copy), unit_kv(cache, 7, 30)));
    QCOMPARE(units.unit(copy).positions, iota(7, 30));
    QVERIFY_EXCEPTION_THROWN(units.add_from_cache("episode", -1, cache, 40, 10, PageTier::kPinned),
                             std::invalid_argument);
  }
};

QTEST_GUILESS_MAIN(KvPagesTest)
#include "test_kv_pages.moc"
