// KEEP's layer pipeline (issue 16, §4.3): the load planner copies exactly what each layer reads,
// never twice, before the layer runs; on a recompute plan shaped like KEEP's (much recomputed
// early, little late) a simulated copy engine and compute stream finish sooner with the
// layer-balanced schedule than with naive next-layer loading, and sooner with naive than serial;
// the selective prefill fed from the paged pool (units stored at other positions, re-rotated per
// layer) gives the same logits and plan as with the units' KV in place, for every policy and
// schedule.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/engine/loaded_model.h"
#include "core/engine/memory_unit_kv.h"
#include "core/engine/selective_recompute.h"
#include "core/kv/kv_unit_pool.h"
#include "core/policies/layer_load_planner.h"
#include "core/policies/recompute_policy.h"
#include "core/runtime/attention.h"
#include "gpu/device_timeline.h"
#include "gpu/page_gather.h"
#include "gpu/unit_attention_mass.h"
#include "support/fixture_models.h"

using namespace engram;

namespace {

// dropped[l][u] for a KEEP-like plan: nothing dropped at layer 0, then the recomputed share
// falls from 40 % to 5 % (units dropped in order, never brought back).
std::vector<std::vector<bool>> keep_like_plan(int64_t layers, int64_t units) {
  std::vector<std::vector<bool>> plan;
  for (int64_t l = 0; l < layers; ++l) {
    const double kept = l == 0 ? 1.0 : 0.40 - 0.35 * static_cast<double>(l - 1) / (layers - 2);
    const auto recomputed = static_cast<int64_t>(kept * static_cast<double>(units) + 0.5);
    std::vector<bool> d(static_cast<size_t>(units));
    for (int64_t u = 0; u < units; ++u)
      d[static_cast<size_t>(u)] = u >= recomputed;
    plan.push_back(d);
  }
  return plan;
}

struct Simulated {
  double makespan = 0;
  int64_t jobs = 0;
};

// One copy engine (FIFO, `copy_ms` per job) and one compute stream; the host decides layer l's
// set when layer l-1 has finished (it waits for the layer's attention evidence), as the runner
// does. Checks that every (unit, layer) read is copied exactly once and before the layer.
Simulated simulate(LayerLoading mode, const std::vector<std::vector<bool>>& dropped,
                   const std::vector<double>& compute_ms, double copy_ms) {
  const auto layers = static_cast<int64_t>(dropped.size());
  const auto units = static_cast<int64_t>(dropped[0].size());
  LayerLoadPlanner planner(mode, layers, units);
  std::vector<double> ready(static_cast<size_t>(layers * units), -1.0);
  double copy_free = 0, compute_free = 0;
  Simulated s;
  auto issue = [&](const std::vector<LayerLoadJob>& jobs, double at) {
    for (const LayerLoadJob& j : jobs) {
      copy_free = std::max(copy_free, at) + copy_ms;
      double& r = ready[static_cast<size_t>(j.layer * units + j.unit)];
      if (r >= 0) throw std::logic_error("copied twice");
      r = copy_free;
      ++s.jobs;
    }
  };
  for (int64_t l = 0; l < layers; ++l) {
    const double host = compute_free;
    issue(planner.due(l, dropped[static_cast<size_t>(l)]), host);
    issue(planner.ahead(l), host);
    double start = compute_free;
    for (int64_t u = 0; u < units; ++u) {
      const double r = ready[static_cast<size_t>(l * units + u)];
      if (dropped[static_cast<size_t>(l)][static_cast<size_t>(u)]) {
        if (r < 0) throw std::logic_error("a layer read a unit never copied");
        start = std::max(start, r);
      }
    }
    const double end = start + compute_ms[static_cast<size_t>(l)];
    while (planner.all_dropped() || copy_free < end) {
      const std::vector<LayerLoadJob> jobs = planner.prefetch(l);
      if (jobs.empty()) break;
      issue(jobs, std::max(host, copy_free));
    }
    compute_free = end;
  }
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t u = 0; u < units; ++u)
      if (ready[static_cast<size_t>(l * units + u)] >= 0 &&
          !dropped[static_cast<size_t>(l)][static_cast<size_t>(u)])
        throw std::logic_error("copied a unit the layer does not read");
  s.makespan = compute_free;
  return s;
}

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace

class KeepLoadingTest : public QObject {
  Q_OBJECT

  std::unique_ptr<LoadedModel> tiny_;

 private Q_SLOTS:
  void initTestCase() {
    const auto dir = std::filesystem::path(ENGRAM_TEST_DATA) / ".." / ".." / "resources" /
                     "models" / "engram-tiny";
    tiny_ =
        std::make_unique<LoadedModel>(load_model({dir, "", 0}, choose_device("cpu", "f32"), {}));
  }

  void plannerCopiesWhatEachLayerReadsOnce() {
    const auto plan = keep_like_plan(12, 20);
    for (LayerLoading mode :
         {LayerLoading::kSerial, LayerLoading::kNaive, LayerLoading::kBalanced}) {
      const Simulated s = simulate(mode, plan, std::vector<double>(12, 1.0), 0.1);
      int64_t read = 0;
      for (const auto& layer : plan)
        read += std::count(layer.begin(), layer.end(), true);
      QCOMPARE(s.jobs, read);
    }
  }

  void plannerRefusesAUnitBroughtBack() {
    LayerLoadPlanner p(LayerLoading::kBalanced, 4, 3);
    (void)p.due(0, {false, false, false});
    (void)p.due(1, {true, false, false});
    QVERIFY_EXCEPTION_THROWN((void)p.due(2, {false, false, true}), std::logic_error);
    LayerLoadPlanner q(LayerLoading::kNaive, 4, 3);
    QVERIFY_EXCEPTION_THROWN((void)q.due(1, {false, false, false}), std::logic_error);
    QVERIFY_EXCEPTION_THROWN((void)parse_layer_loading("eager"), std::invalid_argument);
  }

  void schedulesDifferAsThePaperSays() {
    LayerLoadPlanner naive(LayerLoading::kNaive, 5, 2);
    QVERIFY(naive.due(0, {false, false}).empty());
    QVERIFY(naive.ahead(0).empty());  // nothing dropped yet: nothing known for layer 1
    QCOMPARE(naive.due(1, {true, false}), (std::vector<LayerLoadJob>{{0, 1}}));
    QCOMPARE(naive.ahead(1), (std::vector<LayerLoadJob>{{0, 2}}));
    QVERIFY(naive.prefetch(1).empty());
    LayerLoadPlanner balanced(LayerLoading::kBalanced, 5, 2);
    (void)balanced.due(0, {false, false});
    (void)balanced.due(1, {true, false});
    (void)balanced.ahead(1);
    QCOMPARE(balanced.prefetch(1), (std::vector<LayerLoadJob>{{0, 3}}));
    QCOMPARE(balanced.prefetch(1), (std::vector<LayerLoadJob>{{0, 4}}));
    QVERIFY(balanced.prefetch(1).empty());
    QVERIFY(!balanced.all_dropped());
    // Unit 1 dropped at layer 2: layer 2 waits for it; its later layers are known from then on.
    QCOMPARE(balanced.due(2, {true, true}), (std::vector<LayerLoadJob>{{1, 2}}));
    QCOMPARE(balanced.ahead(2), (std::vector<LayerLoadJob>{{1, 3}}));
    QCOMPARE(balanced.prefetch(2), (std::vector<LayerLoadJob>{{1, 4}}));
    QVERIFY(balanced.all_dropped());
  }

  void balancedFinishesSoonerOnAKeepLikePlan() {
    // Compute per layer grows with the units recomputed; a copy is a tenth of a full layer.
    const int64_t layers = 24, units = 20;
    const auto plan = keep_like_plan(layers, units);
    std::vector<double> compute;
    for (const auto& d : plan)
      compute.push_back(0.3 + 0.05 * static_cast<double>(std::count(d.begin(), d.end(), false)));
    const double serial = simulate(LayerLoading::kSerial, plan, compute, 0.05).makespan;
    const double naive = simulate(LayerLoading::kNaive, plan, compute, 0.05).makespan;
    const double balanced = simulate(LayerLoading::kBalanced, plan, compute, 0.05).makespan;
    qInfo("simulated makespan: serial %.2f naive %.2f balanced %.2f", serial, naive, balanced);
    QVERIFY(naive < serial);
    QVERIFY(balanced < naive);
    // The lower bound: neither the copy engine nor compute can finish sooner than its own work.
    double copies = 0, work = 0;
    for (size_t l = 0; l < plan.size(); ++l) {
      copies += 0.05 * static_cast<double>(std::count(plan[l].begin(), plan[l].end(), true));
      work += compute[l];
    }
    QVERIFY(balanced >= std::max(copies, work) - 1e-9);
  }

  // The probes' unit mass in one pass (gpu/unit_attention_mass.h) against the probabilities it
  // replaces: masked softmax per head, head mean, summed per unit (unit_mass_of). Keys outside
  // every unit (prefix, query) count in the softmax but in no unit.
  void unitMassFromScoresEqualsTheProbabilities() {
    at::manual_seed(5);
    const int64_t hq = 6, hkv = 2, d = 16;
    const AssembledLayout layout = assemble_layout(3, {4, 7, 1, 5}, 3);  // 23 rows
    const int64_t t = layout.total;
    const std::vector<int64_t> rows{4, 6, 10, 13, 14, 19, 20, 21, 22};
    const at::Tensor q = at::randn({1, hq, static_cast<int64_t>(rows.size()), d});
    AttendKv kv;
    kv.keys = at::randn({1, hkv, t, d});
    kv.values = at::randn({1, hkv, t, d});
    kv.key_positions = at::arange(t, at::kLong).unsqueeze(0);
    const at::Tensor positions = at::tensor(rows, at::kLong);
    const at::Tensor probs =
        attention_probabilities(q, kv, positions.unsqueeze(0), std::nullopt);  // [1, Hq, R, T]
    const at::Tensor expected = unit_mass_of(probs[0].mean(0), unit_of_column(layout, at::kCPU),
                                             static_cast<int64_t>(layout.units.size()));
    std::vector<int64_t> begins, ends;
    for (const UnitSpan& span : layout.units) {
      begins.push_back(span.begin);
      ends.push_back(span.end);
    }
    const at::Tensor got = gpu::unit_attention_mass(
        attention_scores(q, kv.keys)[0], positions, at::tensor(begins, at::kLong),
        at::tensor(ends, at::kLong), 1.0 / std::sqrt(static_cast<double>(d)));
    QCOMPARE(got.sizes(), expected.sizes());
    QVERIFY(at::allclose(got, expected, 1e-5, 1e-6));
    // A row sees only keys up to its position: row 4 (in unit 0) gives unit 1 nothing.
    QCOMPARE(got[0][1].item<float>(), 0.f);
    QVERIFY(got[0][0].item<float>() > 0.f);
  }

  // Unit attention measured from a unit's last N rows: with N past the longest unit it is every
  // row, and KEEP chooses exactly as when it measures every row.
  void probeRowsCoveringEveryRowChooseAsEveryRow() {
    const Decoder& d = *tiny_->decoder;
    const PrefixKv prefix = compute_prefix_kv(d, {1, 5, 9});
    std::vector<UnitKv> units;
    for (int64_t i = 0; i < 8; ++i) {
      std::vector<int64_t> tokens;
      for (int64_t t = 0; t < 4 + 2 * i; ++t)
        tokens.push_back(3 + (i * 71 + t * 13) % (d.config().vocab_size - 3));
      units.push_back(compute_unit_kv(d, prefix, {"u" + std::to_string(i), "object", 1, tokens}));
    }
    AssembledPrompt prompt;
    prompt.prefix = &prefix;
    for (const UnitKv& u : units)
      prompt.units.push_back(&u);
    prompt.query = {7, 21, 33};
    auto run = [&](const std::string& spec) {
      auto policy = make_recompute_policy(spec);
      KvCache out(shape_of(d.config()), 1, 1, d.dtype(), d.device());
      return selective_prefill(d, prompt, *policy, out);
    };
    const SelectivePrefill all = run("keep:mean=0.3"), covering = run("keep:mean=0.3,probe=100"),
                           few = run("keep:mean=0.3,probe=1");
    QVERIFY(all.plan.rows == covering.plan.rows);
    // The same rows, two arithmetics: every row's output from the measured probabilities, and
    // with probes the attention per run of contiguous rows (f32 reductions in another order:
    // 1.5e-5 on logits of magnitude 8.6).
    QVERIFY(max_diff(all.logits, covering.logits) < 5e-5);
    // One row per unit measures something else: the rounds after the first, which score units
    // by the attention from the relevant units' rows, differ clearly (the first round's scores
    // come from the query's rows, probed in full either way, and may be equal to the bit).
    QVERIFY(few.plan.hops[0].size() > 1 && all.plan.hops[0].size() > 1);
    double apart = 0;
    for (size_t i = 0; i < all.plan.hops[0][1].scores.size(); ++i)
      apart =
          std::max(apart, std::abs(few.plan.hops[0][1].scores[i] - all.plan.hops[0][1].scores[i]));
    QVERIFY2(apart > 1e-3, qPrintable(QString("second round's scores %1 apart").arg(apart)));
    QVERIFY_EXCEPTION_THROWN(make_recompute_policy("keep:probe=-1"), std::invalid_argument);
  }

  // A step's changed units in one padded forward equal each computed alone.
  void unitsComputedTogetherEqualUnitsComputedAlone() {
    const Decoder& d = *tiny_->decoder;
    const PrefixKv prefix = compute_prefix_kv(d, {1, 5, 9});
    const std::vector<MemoryUnit> units = {{"a", "object", 1, {11, 12, 13, 14, 15, 16, 17}},
                                           {"b", "object", 1, {21, 22}},
                                           {"c", "agent", 3, {31, 32, 33, 34}}};
    const std::vector<UnitKv> together = compute_unit_kvs(d, prefix, units);
    QCOMPARE(together.size(), units.size());
    for (size_t i = 0; i < units.size(); ++i) {
      const UnitKv alone = compute_unit_kv(d, prefix, units[i]);
      QCOMPARE(together[i].tokens, units[i].tokens);
      QCOMPARE(together[i].keys.sizes(), alone.keys.sizes());
      QVERIFY(max_diff(together[i].keys, alone.keys) < 1e-5);
      QVERIFY(max_diff(together[i].values, alone.values) < 1e-5);
    }
  }

  // The changed units' layers handed out as they are computed (compute_unit_kvs' on_layer) and
  // written into pages reserved in the pool hold exactly the KV the forward returns: what the
  // prefill beside it reads (bench keep --invalidation overlapped).
  void unitsWrittenLayerByLayerIntoReservedPages() {
    const Decoder& d = *tiny_->decoder;
    const ModelConfig& c = d.config();
    const PrefixKv prefix = compute_prefix_kv(d, {1, 5, 9});
    const std::vector<MemoryUnit> units = {{"a", "object", 1, {11, 12, 13, 14, 15, 16, 17}},
                                           {"b", "object", 1, {21, 22}},
                                           {"c", "agent", 3, {31, 32, 33, 34, 35}}};
    KvPagePoolOptions options;
    options.page_tokens = 4;  // partial last pages
    options.pinned_pages = 8;
    options.device_pages = 16;
    KvPagePool pages(shape_of(c), d.dtype(), d.device(), options);
    KvUnitPool pool(pages);
    std::vector<int64_t> ids;
    for (const MemoryUnit& u : units) {
      std::vector<int64_t> positions;
      for (size_t t = 0; t < u.tokens.size(); ++t)
        positions.push_back(prefix.end_position() + static_cast<int64_t>(t));
      ids.push_back(pool.reserve("object", -1, positions, PageTier::kDevice));
    }
    QCOMPARE(pool.unit(ids[0]).pages.size(), size_t{2});
    std::vector<int64_t> layers_seen;
    const std::vector<UnitKv> kvs = compute_unit_kvs(
        d, prefix, units,
        [&](int64_t layer, const at::Tensor& keys, const at::Tensor& values,
            const std::vector<int64_t>& first_slots) {
          QCOMPARE(first_slots.size(), units.size());
          PageTableRows rows;
          for (size_t u = 0; u < ids.size(); ++u)
            rows.add_unit(pool.unit(ids[u]), first_slots[u], PageTier::kDevice, 4);
          const at::Tensor table = rows.host_tensor(false);
          at::Tensor slab = pages.slab(PageTier::kDevice);
          gpu::scatter_pages(slab, layer, keys, values, table[0], table[1], table[2]);
          layers_seen.push_back(layer);
        });
    QCOMPARE(static_cast<int64_t>(layers_seen.size()), c.num_layers);
    QVERIFY(std::is_sorted(layers_seen.begin(), layers_seen.end()));
    for (size_t u = 0; u < units.size(); ++u) {
      const at::Tensor stored = pool.read(ids[u]);  // [layers, 2, kv_heads, n, head_dim]
      QCOMPARE(max_diff(stored.select(1, 0), kvs[u].keys), 0.0);
      QCOMPARE(max_diff(stored.select(1, 1), kvs[u].values), 0.0);
    }
    QVERIFY_EXCEPTION_THROWN(pool.reserve("object", -1, {0, 1}, PageTier::kDisk),
                             std::invalid_argument);
  }

  // Units stored in the paged pool at positions other than where they land; every policy and
  // schedule through the pool equals the units' KV put in place.
  void pooledUnitsEqualUnitsInPlace() {
    const Decoder& d = *tiny_->decoder;
    const ModelConfig& c = d.config();
    PrefixKv prefix = compute_prefix_kv(d, {1, 5, 9, 14});
    std::vector<UnitKv> units;
    for (int64_t i = 0; i < 7; ++i) {
      std::vector<int64_t> tokens;
      for (int64_t t = 0; t < 5 + 3 * i; ++t)
        tokens.push_back(3 + (i * 131 + t * 17) % (c.vocab_size - 3));
      units.push_back(compute_unit_kv(d, prefix, {"u" + std::to_string(i), "object", 1, tokens}));
    }
    AssembledPrompt prompt;
    prompt.prefix = &prefix;
    for (const UnitKv& u : units)
      prompt.units.push_back(&u);
    prompt.query = {7, 21, 33, 40, 52};

    KvPagePoolOptions options;
    options.page_tokens = 4;  // pages of consecutive units and partial last pages
    options.pinned_pages = 64;
    options.device_pages = 64;
    KvPagePool pages(shape_of(c), d.dtype(), d.device(), options);
    KvUnitPool pool(pages);
    gpu::DeviceTimeline timeline(d.device());
    PooledUnits pooled;
    pooled.pool = &pool;
    pooled.timeline = &timeline;
    for (size_t i = 0; i < units.size(); ++i) {
      const UnitKv& u = units[i];
      std::vector<int64_t> positions;
      for (size_t t = 0; t < u.tokens.size(); ++t)
        positions.push_back(u.first_position + static_cast<int64_t>(t));
      // Odd units on the device tier (just recomputed), even ones pinned.
      pooled.ids.push_back(pool.add("object", -1, at::stack({u.keys, u.values}, 1), positions,
                                    i % 2 ? PageTier::kDevice : PageTier::kPinned));
    }
    for (const std::string spec :
         {"full-reuse", "keep", "keep:mean=0.3", "keep:probe=2", "cacheblend", "full-recompute"}) {
      auto reference_policy = make_recompute_policy(spec);
      KvCache ref_out(shape_of(c), 1, 1, d.dtype(), d.device());
      const SelectivePrefill ref = selective_prefill(d, prompt, *reference_policy, ref_out);
      for (LayerLoading mode :
           {LayerLoading::kSerial, LayerLoading::kNaive, LayerLoading::kBalanced}) {
        pooled.loading = mode;
        auto policy = make_recompute_policy(spec);
        KvCache out(shape_of(c), 1, 1, d.dtype(), d.device());
        const SelectivePrefill r = selective_prefill(d, prompt, *policy, out, &pooled);
        const QString what = QString::fromStdString(spec + " " + layer_loading_name(mode));
        QVERIFY2(max_diff(r.logits, ref.logits) < 1e-5, qPrintable(what));
        QVERIFY2(r.plan.rows == ref.plan.rows, qPrintable(what));
        for (int64_t l = 0; l < c.num_layers; ++l)
          QVERIFY2(max_diff(out.keys(l), ref_out.keys(l)) < 1e-5, qPrintable(what));
        // Exactly the (unit, layer) pairs read: dropped units, plus every unit at CacheBlend's
        // selection layer (its key deviation reads the cached keys).
        int64_t read = 0;
        for (int64_t l = 0; l < c.num_layers; ++l) {
          const auto dropped = dropped_units(r.layout, r.plan.rows[static_cast<size_t>(l)]);
          const bool all = spec == "cacheblend" && l == 1;
          read += all ? static_cast<int64_t>(dropped.size())
                      : std::count(dropped.begin(), dropped.end(), true);
        }
        QVERIFY2(r.loads.jobs == read, qPrintable(what + " jobs " + QString::number(r.loads.jobs) +
                                                  " read " + QString::number(read)));
      }
    }
    // The device-tier units marked written layer by layer (the marks of a writer on another
    // stream; here all already reached): the same prefill. One mark per layer or refused.
    for (int64_t l = 0; l < c.num_layers; ++l)
      pooled.device_layer_ready.push_back(timeline.mark(gpu::Lane::kCompute));
    pooled.loading = LayerLoading::kBalanced;
    {
      auto reference_policy = make_recompute_policy("keep");
      KvCache ref_out(shape_of(c), 1, 1, d.dtype(), d.device());
      const SelectivePrefill ref = selective_prefill(d, prompt, *reference_policy, ref_out);
      auto policy = make_recompute_policy("keep");
      KvCache out(shape_of(c), 1, 1, d.dtype(), d.device());
      const SelectivePrefill r = selective_prefill(d, prompt, *policy, out, &pooled);
      QVERIFY(max_diff(r.logits, ref.logits) < 1e-5);
    }
    pooled.device_layer_ready.pop_back();
    auto policy = make_recompute_policy("keep");
    KvCache out(shape_of(c), 1, 1, d.dtype(), d.device());
    QVERIFY_EXCEPTION_THROWN(selective_prefill(d, prompt, *policy, out, &pooled),
                             std::invalid_argument);
  }
};

QTEST_APPLESS_MAIN(KeepLoadingTest)
#include "test_keep_loading.moc"
