// The KvSource seam: the plain cache, position re-rotation, ragged batched decode, and the
// pinned-host source that copies each layer's prefix KV on the copy lane — each against the
// plain full computation.
#include <QtTest>

#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "core/kv/pinned_kv_source.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_timeline.h"
#include "support/collected_intervals.h"
#include "support/reference_fixture.h"

using namespace engram;

namespace {

using Collect = test::CollectedIntervals;
using test::iota;

}  // namespace

class KvSourcesTest : public QObject {
  Q_OBJECT

  LoadedModel model_;
  KvCacheShape shape() const {
    const auto& c = model_.config;
    return {c.num_layers, c.num_kv_heads, c.head_dim};
  }
  at::Tensor forward(KvSource& source, std::vector<std::vector<int64_t>> tokens,
                     std::vector<std::vector<int64_t>> positions, TraceRecorder* trace = nullptr,
                     gpu::DeviceTimeline* timeline = nullptr) {
    gpu::DeviceTimeline own(at::kCPU);
    ForwardRequest req;
    req.tokens = std::move(tokens);
    req.positions = std::move(positions);
    req.all_logits = true;
    return model_.decoder->forward(req, source, timeline ? *timeline : own, trace).logits;
  }
  std::vector<int64_t> ids(int64_t n, int64_t salt = 0) const {
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i)
      v[i] = 3 + (i * 7919 + salt * 104729) % 900;
    return v;
  }

 private Q_SLOTS:
  void initTestCase() {
    model_ = load_model({test::fixture_model("qwen2-bias-tied"), "", 0},
                        choose_device("cpu", "f32"), {});
  }

  // A unit's KV computed at offset 0 and re-rotated to offset p equals the KV computed at p.
  void reRotatedKeysEqualKeysComputedThere() {
    const int64_t n = 6, p = 37;
    const auto unit = ids(n);
    KvCache at_zero(shape(), 1, n, at::kFloat, at::kCPU);
    KvCache at_p(shape(), 1, n, at::kFloat, at::kCPU);
    CacheKvSource s0(at_zero), sp(at_p);
    forward(s0, {unit}, {iota(0, n)});
    forward(sp, {unit}, {iota(p, n)});
    at_zero.rerotate(0, 0, n, p, model_.decoder->rope().inverse_frequencies());
    for (int64_t l = 0; l < shape().layers; ++l) {
      const double dk = (at_zero.keys(l) - at_p.keys(l)).abs().max().item<double>();
      const double dv = (at_zero.values(l) - at_p.values(l)).abs().max().item<double>();
      QVERIFY2(dk < 1e-5 && dv < 1e-5,
               qPrintable(QString("layer %1: %2 %3").arg(l).arg(dk).arg(dv)));
    }
    QCOMPARE(at_zero.positions()[0][0].item<int64_t>(), p);
  }

  // Two sequences of different lengths decoded together (padding + position mask) give the
  // logits each gives alone.
  void raggedBatchDecodeMatchesSingleSequences() {
    const std::vector<std::vector<int64_t>> prompts = {ids(5, 1), ids(9, 2)};
    KvCache batch(shape(), 2, 16, at::kFloat, at::kCPU);
    std::vector<KvCache> alone;
    for (int r = 0; r < 2; ++r) {
      alone.emplace_back(shape(), 1, 16, at::kFloat, at::kCPU);
      CacheKvSource s(alone.back());
      const int64_t n = static_cast<int64_t>(prompts[r].size());
      forward(s, {prompts[r]}, {iota(0, n)});
      batch.copy_row_from(r, alone.back(), 0);
    }
    QVERIFY(!batch.dense());
    CacheKvSource batch_source(batch);
    for (int step = 0; step < 4; ++step) {
      const std::vector<int64_t> next = {100 + step, 200 + step};
      const at::Tensor together = forward(batch_source, {{next[0]}, {next[1]}},
                                          {{batch.lengths()[0]}, {batch.lengths()[1]}});
      for (int r = 0; r < 2; ++r) {
        CacheKvSource s(alone[r]);
        const at::Tensor single = forward(s, {{next[r]}}, {{alone[r].lengths()[0]}});
        const double err = (together[r] - single[0]).abs().max().item<double>();
        QVERIFY2(err < 1e-5, qPrintable(QString("row %1 step %2: %3").arg(r).arg(step).arg(err)));
      }
    }
  }

  // A prefix served from pinned host memory through the copy lane gives the logits of the
  // plain cache, and the trace shows one copy and one compute interval per layer.
  void pinnedHostPrefixMatchesPlainCache() {
    const int64_t p = 11, s = 5;
    const auto tokens = ids(p + s, 3);
    const std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + p);
    const std::vector<int64_t> rest(tokens.begin() + p, tokens.end());
    KvCache full(shape(), 1, p + s, at::kFloat, at::kCPU);
    CacheKvSource full_source(full);
    const at::Tensor expected = forward(full_source, {tokens}, {iota(0, p + s)});

    KvCache prefix_cache(shape(), 1, p, at::kFloat, at::kCPU);
    CacheKvSource prefix_source(prefix_cache);
    forward(prefix_source, {prefix}, {iota(0, p)});
    const HostKv host = offload_to_host(prefix_cache, p);
    KvCache tail(shape(), 1, 8, at::kFloat, at::kCPU);
    PinnedKvSource pinned(host, tail, /*prefetch_depth=*/2);
    Collect collect;
    gpu::DeviceTimeline timeline(at::kCPU);
    TraceRecorder trace(timeline, &collect, 1);
    const at::Tensor got = forward(pinned, {rest}, {iota(p, s)}, &trace, &timeline);
    const double err = (got[0] - expected[0].narrow(0, p, s)).abs().max().item<double>();
    QVERIFY2(err < 1e-5, qPrintable(QString("error %1").arg(err)));
    trace.flush();
    int copies = 0, layers = 0;
    for (const auto& i : collect.intervals) {
      if (i.lane == TraceLane::kCopy) {
        ++copies;
        QCOMPARE(i.bytes, host.bytes_per_layer());
        QCOMPARE(i.tokens, p);
      } else if (i.what == "layer") {
        ++layers;
      }
      QVERIFY(i.end_us >= i.start_us);
    }
    QCOMPARE(copies, static_cast<int>(shape().layers));
    QCOMPARE(layers, static_cast<int>(shape().layers));
    // Decoding continues on the same source.
    const at::Tensor step = forward(pinned, {{42}}, {{p + s}});
    KvCache check(shape(), 1, p + s + 1, at::kFloat, at::kCPU);
    CacheKvSource check_source(check);
    auto with_next = tokens;
    with_next.push_back(42);
    const at::Tensor all = forward(check_source, {with_next}, {iota(0, p + s + 1)});
    QVERIFY((step[0][0] - all[0][p + s]).abs().max().item<double>() < 1e-5);
  }

  // Generation records one compute interval per layer and forward, written as JSON lines that
  // parse back to the same intervals.
  void traceLinesRoundTrip() {
    Collect collect;
    KvCache cache(shape(), 1, 32, at::kFloat, at::kCPU);
    GenerationOptions options;
    options.max_new_tokens = 3;
    options.stop_at_eos = false;
    options.observer = &collect;
    options.trace = true;
    generate(*model_.decoder, cache, {}, ids(7), options, {});
    // Prefill + 2 decode forwards (the third token needs none), each L layers + lm_head.
    QCOMPARE(collect.intervals.size(), static_cast<size_t>(3 * (shape().layers + 1)));
    for (const auto& i : collect.intervals) {
      const LayerInterval back = parse_json_line(to_json_line(i));
      QCOMPARE(back.layer, i.layer);
      QCOMPARE(back.phase, i.phase);
      QCOMPARE(back.start_us, i.start_us);
      QCOMPARE(back.clock, std::string("wall"));
    }
    QVERIFY_EXCEPTION_THROWN(parse_json_line("{\"layer\": 1}"), std::invalid_argument);
  }
};

QTEST_GUILESS_MAIN(KvSourcesTest)
#include "test_kv_sources.moc"
