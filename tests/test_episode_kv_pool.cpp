// Waiting episodes in the paged pool (core/engine/episode_kv_pool.h): an episode written back and
// loaded again is bit for bit the working set it was (KV, positions, which stream token each slot
// holds, ragged per-head lists included); a write-back after appends writes only the new tokens,
// one after a plan rewrites the whole set; with room for one episode in the pinned tier the
// least recently used episode spills to the disk tier and comes back unchanged; a copy is its
// source; a checkpoint (a store's save) appends after what is stored and adopted units give the
// working set back.
#include <QtTest>

#include "core/engine/episode_kv_pool.h"
#include "core/engine/loaded_model.h"
#include "core/kv/cache_kv_source.h"
#include "gpu/device_timeline.h"
#include "support/collected_intervals.h"
#include "support/fixture_models.h"
#include "support/reference_fixture.h"

using namespace engram;

namespace {

bool same_set(const KvWorkingSet& a, const KvWorkingSet& b) {
  if (a.tokens() != b.tokens() || a.stream_tokens() != b.stream_tokens() ||
      a.exact_slot() != b.exact_slot() || !at::equal(a.slot_stream(), b.slot_stream())) {
    return false;
  }
  const int64_t n = a.tokens();
  if (!at::equal(a.cache().positions().narrow(1, 0, n), b.cache().positions().narrow(1, 0, n)))
    return false;
  for (int64_t l = 0; l < a.cache().shape().layers; ++l) {
    if (!at::equal(a.cache().keys(l), b.cache().keys(l)) ||
        !at::equal(a.cache().values(l), b.cache().values(l))) {
      return false;
    }
    const at::Tensor va = a.cache().key_valid(l), vb = b.cache().key_valid(l);
    if (va.defined() != vb.defined() || (va.defined() && !at::equal(va, vb))) return false;
  }
  return true;
}

}  // namespace

class EpisodeKvPoolTest : public QObject {
  Q_OBJECT

  LoadedModel model_;
  QTemporaryDir dir_;

  KvCacheShape shape() const {
    const auto& c = model_.config;
    return {c.num_layers, c.num_kv_heads, c.head_dim};
  }
  std::unique_ptr<KvWorkingSet> working_set() const {
    return std::make_unique<KvWorkingSet>(shape(), 160, at::kFloat, at::Device(at::kCPU),
                                          model_.config.max_positions);
  }
  // Feeds n tokens of the stream through the model into the working set.
  void feed(KvWorkingSet& ws, int64_t n, int64_t salt) const {
    CacheKvSource source(ws.cache());
    gpu::DeviceTimeline timeline(at::Device(at::kCPU));
    ForwardRequest req;
    req.tokens = {test::token_ids(n, salt)};
    req.positions = {test::iota(ws.next_position(), n)};
    model_.decoder->forward(req, source, timeline, nullptr);
    ws.appended(n);
  }
  EpisodeKvPool pool(int64_t pinned_episodes, int64_t max_units = 16) const {
    EpisodeKvPoolOptions o;
    o.page_tokens = 16;
    o.pinned_episodes = pinned_episodes;
    o.max_units_per_episode = max_units;
    o.spill_dir = dir_.path().toStdString();
    return EpisodeKvPool(shape(), at::kFloat, at::Device(at::kCPU), 160, o);
  }
  // Keeps every other slot in layer 0 head 0 and the last `n` slots everywhere else (ragged).
  KeepPlan ragged_plan(const KvWorkingSet& ws, int64_t n) const {
    KeepPlan plan;
    const int64_t t = ws.tokens();
    plan.per_head.assign(shape().layers, std::vector<std::vector<int64_t>>(shape().kv_heads));
    for (int64_t l = 0; l < shape().layers; ++l) {
      for (int64_t h = 0; h < shape().kv_heads; ++h) {
        for (int64_t s = (l == 0 && h == 0) ? 0 : t - n; s < t; s += (l == 0 && h == 0) ? 2 : 1)
          plan.per_head[l][h].push_back(s);
      }
    }
    return plan;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    model_ = load_model({test::fixture_model("llama-gqa"), "", 0}, choose_device("cpu", "f32"), {});
  }

  void loadGivesBackTheWorkingSetAndAppendsOnlyNewTokens() {
    EpisodeKvPool episodes = pool(4);
    auto ws = working_set();
    feed(*ws, 70, 1);
    episodes.write_back(0, *ws);
    QCOMPARE(episodes.written_tokens(), int64_t{70});
    QCOMPARE(episodes.tokens(0), int64_t{70});

    auto active = working_set();
    QVERIFY(episodes.load(0, *active));
    QVERIFY(same_set(*ws, *active));
    QCOMPARE(active->unchanged_slots(), int64_t{70});
    // A turn appends to the loaded episode: its write-back adds those tokens only.
    feed(*active, 25, 2);
    feed(*ws, 25, 2);
    episodes.write_back(0, *active);
    QCOMPARE(episodes.written_tokens(), int64_t{95});
    QCOMPARE(episodes.places().at(0).units, int64_t{2});
    auto again = working_set();
    QVERIFY(episodes.load(0, *again));
    QVERIFY(same_set(*ws, *again));

    // A plan compacts the slots (here ragged per head): the next write-back rewrites the set.
    const KeepPlan plan = ragged_plan(*again, 40);
    again->apply(plan, model_.decoder->rope().inverse_frequencies());
    ws->apply(plan, model_.decoder->rope().inverse_frequencies());
    QCOMPARE(again->unchanged_slots(), int64_t{0});
    feed(*again, 5, 3);
    feed(*ws, 5, 3);
    const int64_t before = episodes.written_tokens();
    episodes.write_back(0, *again);
    QCOMPARE(episodes.written_tokens() - before, again->tokens());
    QCOMPARE(episodes.places().at(0).units, int64_t{1});
    auto ragged = working_set();
    QVERIFY(episodes.load(0, *ragged));
    QVERIFY(ragged->cache().key_valid(0).defined());
    QVERIFY(same_set(*ws, *ragged));

    // A truncate inside the loaded slots keeps only the units before the cut.
    ragged->truncate(ragged->stream_tokens() - 3);
    QCOMPARE(ragged->unchanged_slots(), ragged->tokens());
    const int64_t cut = episodes.written_tokens();
    episodes.write_back(0, *ragged);
    QCOMPARE(episodes.written_tokens() - cut, ragged->tokens());  // one unit held all of it
    QVERIFY(!episodes.load(7, *ragged));
    QCOMPARE(ragged->tokens(), int64_t{0});
  }

  // A checkpoint (what a store's save does to the active episode) writes the working set back and
  // keeps it counted as loaded: a second one writes nothing, appends after it add one unit and
  // leave the stored one (and its persisted tag) alone, a plan rewrites the set and the tags die
  // with their units; adopting units gives the same working set back, tagged.
  void checkpointAppendsAfterWhatIsStored() {
    EpisodeKvPool episodes = pool(2);
    auto ws = working_set();
    feed(*ws, 50, 7);
    episodes.checkpoint(0, *ws);
    QCOMPARE(ws->unchanged_slots(), int64_t{50});
    const std::vector<int64_t> first = episodes.episode_units(0);
    QCOMPARE(first.size(), size_t{1});
    episodes.set_persisted(first[0], 42);
    episodes.checkpoint(0, *ws);
    QCOMPARE(episodes.written_tokens(), int64_t{50});
    feed(*ws, 20, 8);
    episodes.checkpoint(0, *ws);
    QCOMPARE(episodes.written_tokens(), int64_t{70});
    const std::vector<int64_t> two = episodes.episode_units(0);
    QCOMPARE(two.size(), size_t{2});
    QCOMPARE(two[0], first[0]);
    QCOMPARE(episodes.persisted(two[0]).value_or(0), uint64_t{42});
    QVERIFY(!episodes.persisted(two[1]).has_value());
    QCOMPARE(episodes.units().unit(two[1]).tokens, int64_t{20});

    // Adopted as a store gives them back: the same working set, every unit tagged.
    EpisodeKvPool other = pool(2);
    std::vector<EpisodeKvUnit> units;
    for (int64_t u : two)
      units.push_back({episodes.units().read(u), episodes.units().unit(u).positions, 7});
    other.adopt(3, units, episodes.episode_layout(0));
    QCOMPARE(other.episodes(), std::vector<int32_t>{3});
    for (int64_t u : other.episode_units(3))
      QCOMPARE(other.persisted(u).value_or(0), uint64_t{7});
    auto back = working_set();
    QVERIFY(other.load(3, *back));
    QVERIFY(same_set(*ws, *back));

    const KeepPlan plan = ragged_plan(*ws, 30);
    ws->apply(plan, model_.decoder->rope().inverse_frequencies());
    episodes.checkpoint(0, *ws);
    QCOMPARE(episodes.episode_units(0).size(), size_t{1});
    QVERIFY(!episodes.persisted(episodes.episode_units(0)[0]).has_value());
    QVERIFY(!episodes.persisted(first[0]).has_value());
  }

  void leastRecentlyUsedEpisodeSpillsToDiskAndComesBack() {
    EpisodeKvPool episodes = pool(1, 2);  // 12 pinned pages of 16 tokens
    auto a = working_set(), b = working_set(), c = working_set();
    feed(*a, 150, 4);
    feed(*b, 120, 5);
    feed(*c, 60, 6);
    episodes.write_back(0, *a);
    episodes.write_back(1, *b);  // the pinned tier holds one working set: episode 0 spills
    auto place = [&](int32_t e) {
      for (const EpisodeKvPlace& p : episodes.places())
        if (p.episode == e) return p.tier;
      return PageTier::kDevice;
    };
    QCOMPARE(place(0), PageTier::kDisk);
    QCOMPARE(place(1), PageTier::kPinned);
    QCOMPARE(episodes.spilled_tokens(), int64_t{150});
    auto got = working_set();
    QVERIFY(episodes.load(0, *got));  // back from disk; episode 1 makes room
    QVERIFY(same_set(*a, *got));
    QCOMPARE(place(0), PageTier::kPinned);
    QCOMPARE(place(1), PageTier::kDisk);
    QVERIFY(episodes.load(1, *got));
    QVERIFY(same_set(*b, *got));

    // A copy is its source (it waits on disk where the pinned tier holds only its source);
    // dropping the source leaves the copy whole.
    episodes.copy(1, 2);
    episodes.drop(1);
    QVERIFY(!episodes.has(1));
    QVERIFY(episodes.load(2, *got));
    QVERIFY(same_set(*b, *got));
    episodes.write_back(3, *c);
    QVERIFY(episodes.load(3, *got));
    QVERIFY(same_set(*c, *got));
    episodes.clear();
    QVERIFY(episodes.places().empty());
    QCOMPARE(episodes.units().pages().in_use(PageTier::kPinned), int64_t{0});
    QCOMPARE(episodes.units().pages().in_use(PageTier::kDisk), int64_t{0});
  }
};

QTEST_GUILESS_MAIN(EpisodeKvPoolTest)
#include "test_episode_kv_pool.moc"
