// KEEP's static/dynamic memory groups (issue 16, §4.1): a segment is static after exactly t
// unchanged steps; a change moves it out of its group and rebuilds exactly that group (the
// paper's fixed clusters: the whole cluster splits until t steps later); unchanged
// steps rebuild nothing; groups are deterministic and capped; retrieval takes whole groups; on
// the household world a group's unit KV equals one plain prefill of the prefix + its members.
#include <QtTest>

#include <algorithm>
#include <filesystem>
#include <set>

#include "app/cli/keep_household.h"
#include "core/engine/loaded_model.h"
#include "core/env/household_session.h"
#include "core/kv/cache_kv_source.h"
#include "core/policies/memory_grouping.h"
#include "core/policies/text_embedding.h"
#include "gpu/device_timeline.h"

using namespace engram;

namespace {

// Two families of 4-d embeddings (a*: near e0, b*: near e1) and a loner near e2.
struct World {
  std::map<std::string, int64_t> version;
  std::vector<GroupingSegment> segments() const {
    const std::map<std::string, Embedding> e = {
        {"a1", {1.0f, 0.1f, 0.0f, 0.0f}}, {"b1", {0.1f, 1.0f, 0.0f, 0.1f}},
        {"a2", {0.9f, 0.0f, 0.1f, 0.0f}}, {"b2", {0.0f, 0.9f, 0.1f, 0.0f}},
        {"a3", {1.0f, 0.0f, 0.0f, 0.2f}}, {"b3", {0.2f, 1.0f, 0.0f, 0.0f}},
        {"c1", {0.0f, 0.0f, 1.0f, 0.0f}}};
    std::vector<GroupingSegment> out;
    for (const std::string key : {"a1", "b1", "a2", "b2", "a3", "b3", "c1"}) {
      Embedding v = e.at(key);
      normalize(v);
      // The version moves the embedding a little, as a changed text's pooled states would.
      v[3] += 0.01f * static_cast<float>(version.count(key) ? version.at(key) : 1);
      out.push_back({key, version.count(key) ? version.at(key) : 1, 10 + key[1] - '0', v});
    }
    return out;
  }
};

const GroupedUnit* unit_with(const GroupingStep& s, const std::string& member) {
  for (const GroupedUnit& u : s.units)
    if (std::find(u.members.begin(), u.members.end(), member) != u.members.end()) return &u;
  return nullptr;
}

std::set<std::set<std::string>> groups_of(const GroupingStep& s) {
  std::set<std::set<std::string>> out;
  for (const GroupedUnit& u : s.units)
    if (u.members.size() > 1) out.insert({u.members.begin(), u.members.end()});
  return out;
}

GroupingOptions options(int64_t t) {
  GroupingOptions o;
  o.static_after = t;
  o.join_threshold = 0.3;
  return o;
}

}  // namespace

class TestKeepGrouping : public QObject {
  Q_OBJECT

  std::unique_ptr<LoadedModel> tiny_;

 private Q_SLOTS:
  void initTestCase() {
    const auto dir = std::filesystem::path(ENGRAM_TEST_DATA) / ".." / ".." / "resources" /
                     "models" / "engram-tiny";
    tiny_ =
        std::make_unique<LoadedModel>(load_model({dir, "", 0}, choose_device("cpu", "f32"), {}));
  }

  void segmentIsStaticAfterExactlyTUnchangedSteps() {
    MemoryGrouping g(options(3));
    World w;
    for (int s = 0; s < 3; ++s) {
      QVERIFY(!unit_with(g.step(w.segments()), "a1")->is_static);
      QCOMPARE(g.last().static_segments, int64_t{0});
    }
    QVERIFY(unit_with(g.step(w.segments()), "a1")->is_static);  // step 3: 3 steps unchanged
    QCOMPARE(g.last().static_segments, int64_t{7});
    // A new segment starts dynamic; a change at step 4 makes b2 static again at step 7.
    MemoryGrouping h(options(3));
    for (int s = 0; s < 8; ++s) {
      if (s == 4) w.version["b2"] = 2;
      const GroupingStep& st = h.step(w.segments());
      const bool expect = s == 3 || s >= 7;
      QVERIFY2(unit_with(st, "b2")->is_static == expect, qPrintable(QString::number(s)));
    }
  }

  void staticSegmentsFormGroupsBySimilarity() {
    MemoryGrouping g(options(2));
    World w;
    for (int s = 0; s < 2; ++s)
      g.step(w.segments());
    const GroupingStep& st = g.step(w.segments());
    const std::set<std::set<std::string>> expected = {{"a1", "a2", "a3"}, {"b1", "b2", "b3"}};
    QCOMPARE(groups_of(st), expected);
    // A static group is one unit; the loner is a static unit of its own (its segment's KV).
    QCOMPARE(st.units.size(), size_t{3});
    QCOMPARE(unit_with(st, "c1")->key, std::string("c1"));
    QVERIFY(unit_with(st, "c1")->is_static);
    // Units sit at their first member's place, members in input order.
    QCOMPARE(st.units[0].members, (std::vector<std::string>{"a1", "a2", "a3"}));
    QCOMPARE(st.units[1].members, (std::vector<std::string>{"b1", "b2", "b3"}));
    QCOMPARE(st.units[0].tokens, int64_t{11 + 12 + 13});
  }

  void unchangedStepsRebuildNothing() {
    MemoryGrouping g(options(2));
    World w;
    int64_t rebuilt = 0;
    for (int s = 0; s < 3; ++s)
      rebuilt = g.step(w.segments()).units_rebuilt;
    QCOMPARE(rebuilt, int64_t{2});  // the two groups formed at step 2 (c1 keeps its KV)
    const std::vector<GroupedUnit> before = g.last().units;
    for (int s = 0; s < 5; ++s) {
      const GroupingStep& st = g.step(w.segments());
      QCOMPARE(st.units_rebuilt, int64_t{0});
      QCOMPARE(st.tokens_rebuilt, int64_t{0});
      QCOMPARE(st.units.size(), before.size());
      for (size_t i = 0; i < before.size(); ++i) {
        QCOMPARE(st.units[i].key, before[i].key);
        QCOMPARE(st.units[i].version, before[i].version);
        QCOMPARE(st.units[i].members, before[i].members);
      }
    }
  }

  void changedMemberLeavesAndRebuildsExactlyThatGroup() {
    MemoryGrouping g(options(2));
    World w;
    for (int s = 0; s < 4; ++s)
      g.step(w.segments());
    const GroupedUnit a = *unit_with(g.last(), "a1");
    const GroupedUnit b = *unit_with(g.last(), "b1");
    w.version["a2"] = 2;
    const GroupingStep& st = g.step(w.segments());
    const GroupedUnit* a_after = unit_with(st, "a1");
    QCOMPARE(a_after->key, a.key);
    QCOMPARE(a_after->version, a.version + 1);
    QCOMPARE(a_after->members, (std::vector<std::string>{"a1", "a3"}));
    QVERIFY(!unit_with(st, "a2")->is_static);
    QCOMPARE(unit_with(st, "a2")->members, (std::vector<std::string>{"a2"}));
    QCOMPARE(unit_with(st, "b1")->version, b.version);
    QCOMPARE(st.units_rebuilt, int64_t{2});              // group a and the dynamic a2
    QCOMPARE(st.tokens_rebuilt, int64_t{11 + 13 + 12});  // a1 + a3, then a2 alone
    // t steps later a2 is static again and rejoins its family: that group alone is rebuilt.
    g.step(w.segments());
    const GroupingStep& back = g.step(w.segments());
    QCOMPARE(unit_with(back, "a2")->key, a.key);
    QCOMPARE(unit_with(back, "a2")->version, a.version + 2);
    QCOMPARE(back.units_rebuilt, int64_t{1});
    QCOMPARE(back.tokens_rebuilt, int64_t{36});
    // A group left with one member is that segment's unit; a member that disappears leaves too.
    w.version["a1"] = 2;
    w.version["a3"] = 2;
    QCOMPARE(unit_with(g.step(w.segments()), "a2")->key, std::string("a2"));
  }

  // The paper's variant: clusters fixed when segments first appear; a cluster is one unit only
  // while every member has been unchanged for t steps; a change splits the whole cluster into
  // segments (each rebuilt alone) until t steps later, when it is one unit again (new version).
  void fixedClustersAreOneUnitOnlyWhileAllMembersAreStatic() {
    GroupingOptions o = options(2);
    o.fixed_clusters = true;
    MemoryGrouping g(o);
    World w;
    // Step 0: clustered at once, nothing static yet: every segment its own unit.
    const GroupingStep& first = g.step(w.segments());
    QCOMPARE(first.units.size(), size_t{7});
    QCOMPARE(first.static_segments, int64_t{0});
    g.step(w.segments());
    const GroupingStep& formed = g.step(w.segments());  // step 2: t = 2 steps unchanged
    const std::set<std::set<std::string>> expected = {{"a1", "a2", "a3"}, {"b1", "b2", "b3"}};
    QCOMPARE(groups_of(formed), expected);
    QCOMPARE(formed.units_rebuilt, int64_t{2});
    const GroupedUnit a = *unit_with(formed, "a1");
    const GroupedUnit b = *unit_with(formed, "b1");
    QVERIFY(a.is_static);
    // a2 changes: the whole a-cluster becomes three dynamic segments; b is untouched.
    w.version["a2"] = 2;
    const GroupingStep& split = g.step(w.segments());
    for (const std::string key : {"a1", "a2", "a3"}) {
      QCOMPARE(unit_with(split, key)->members, (std::vector<std::string>{key}));
      QVERIFY(!unit_with(split, key)->is_static);
    }
    QCOMPARE(unit_with(split, "b1")->version, b.version);
    QCOMPARE(split.units_rebuilt, int64_t{3});  // a1, a2, a3 alone (a1 and a3 unchanged, but
    QCOMPARE(split.tokens_rebuilt, int64_t{11 + 12 + 13});  // their own KV was never held)
    // One step later nothing changes; at t = 2 steps after the change the cluster is whole again,
    // with the same members and a new version.
    QCOMPARE(g.step(w.segments()).units_rebuilt, int64_t{0});
    const GroupingStep& back = g.step(w.segments());
    const GroupedUnit* a_back = unit_with(back, "a2");
    QCOMPARE(a_back->key, a.key);
    QCOMPARE(a_back->members, (std::vector<std::string>{"a1", "a2", "a3"}));
    QVERIFY(a_back->version > a.version);
    QCOMPARE(back.units_rebuilt, int64_t{1});
    QCOMPARE(back.tokens_rebuilt, int64_t{36});
    // Unchanged steps rebuild nothing.
    QCOMPARE(g.step(w.segments()).units_rebuilt, int64_t{0});
    QCOMPARE(cli::parse_household_grouping("clusters").name(), std::string("clusters"));
    QVERIFY(cli::parse_household_grouping("clusters").options.fixed_clusters);
    QVERIFY(!cli::parse_household_grouping("static-dynamic").options.fixed_clusters);
  }

  void groupsAreDeterministicAndCapped() {
    GroupingOptions o = options(1);
    MemoryGrouping g1(o), g2(o);
    World w;
    for (int s = 0; s < 6; ++s) {
      if (s == 3) w.version["b3"] = 2;
      const GroupingStep& x = g1.step(w.segments());
      const GroupingStep& y = g2.step(w.segments());
      QCOMPARE(x.units.size(), y.units.size());
      for (size_t i = 0; i < x.units.size(); ++i) {
        QCOMPARE(x.units[i].key, y.units[i].key);
        QCOMPARE(x.units[i].version, y.units[i].version);
        QCOMPARE(x.units[i].members, y.units[i].members);
      }
    }
    o.max_group_segments = 2;
    MemoryGrouping capped(o);
    capped.step(w.segments());
    for (const GroupedUnit& u : capped.step(w.segments()).units)
      QVERIFY(u.members.size() <= 2);
    QVERIFY(!groups_of(capped.last()).empty());
    // Bad input is refused with the segment named.
    std::vector<GroupingSegment> twice = w.segments();
    twice.push_back(twice.front());
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, capped.step(twice));
  }

  void retrievalReturnsWholeGroups() {
    const std::vector<GroupedUnit> units = {{"group:0", 1, {"a1", "a2", "a3"}, true, 36},
                                            {"b1", 1, {"b1"}, false, 11},
                                            {"b2", 1, {"b2"}, false, 12}};
    const std::map<std::string, double> score = {{"a2", 0.9}, {"b1", 0.5}, {"b2", 0.4}};
    QCOMPARE(select_units(units, score, 4), (std::vector<size_t>{0, 1}));
    QCOMPARE(select_units(units, score, 5), (std::vector<size_t>{0, 1, 2}));
    // The group does not fit: never split; the budget goes to the singles.
    QCOMPARE(select_units(units, score, 2), (std::vector<size_t>{1, 2}));
    QCOMPARE(select_units(units, score, 0), (std::vector<size_t>{}));
  }

  // The household world with t = 0 (everything static at once) on engram-tiny's pooled states.
  void householdGroupKvEqualsPlainPrefill() {
    const Decoder& d = *tiny_->decoder;
    const Tokenizer& tok = *tiny_->tokenizer;
    cli::HouseholdGrouping grouping = cli::parse_household_grouping("static-dynamic");
    grouping.options.static_after = 0;
    cli::HouseholdMemoryUnits memory(
        grouping, [&](const std::string& text) { return embed_text(d, tok, text); });
    env::SessionOptions so;
    so.seed = 1;
    so.task_count = 1;
    env::HouseholdSession session(so);
    const env::EmbodiedPrompt prompt = env::build_embodied_prompt(
        session.memory(), *session.current_task(), session.task_actions());
    const GroupingStep step = memory.observe(tok, prompt);
    const cli::KeepHouseholdPrompt hp = memory.assemble(tok, prompt, 40);
    QVERIFY(hp.tokens_match_text);
    QCOMPARE(hp.retrieved_segments, hp.available_segments);
    // At 10 segments retrieval takes units whole: every unit assembled is a unit of the step.
    const cli::KeepHouseholdPrompt few = memory.assemble(tok, prompt, 10);
    QVERIFY(few.retrieved_segments <= 10 && few.retrieved_segments > 0);
    for (size_t i = 0; i < few.units.size(); ++i) {
      const auto it = std::find_if(step.units.begin(), step.units.end(),
                                   [&](const GroupedUnit& u) { return u.key == few.units[i].key; });
      QVERIFY(it != step.units.end());
      QCOMPARE(few.members[i], it->members);
    }
    const MemoryUnit* group = nullptr;
    for (size_t i = 0; i < hp.units.size(); ++i)
      if (hp.members[i].size() > 1 && (!group || hp.units[i].tokens.size() < group->tokens.size()))
        group = &hp.units[i];
    QVERIFY2(group, "no group of two or more segments formed");
    qInfo("%zu units for %lld segments; checked group %s of %zu tokens", hp.units.size(),
          static_cast<long long>(hp.retrieved_segments), group->key.c_str(), group->tokens.size());

    const PrefixKv prefix = compute_prefix_kv(d, hp.prefix);
    const UnitKv kv = compute_unit_kv(d, prefix, *group);
    std::vector<int64_t> ids = hp.prefix;
    ids.insert(ids.end(), group->tokens.begin(), group->tokens.end());
    const ModelConfig& c = d.config();
    KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, static_cast<int64_t>(ids.size()),
                  d.dtype(), d.device());
    CacheKvSource source(cache);
    gpu::DeviceTimeline timeline(d.device());
    ForwardRequest req;
    req.tokens = {ids};
    req.positions = {{}};
    for (size_t i = 0; i < ids.size(); ++i)
      req.positions[0].push_back(static_cast<int64_t>(i));
    d.forward(req, source, timeline, nullptr);
    const auto p = static_cast<int64_t>(hp.prefix.size());
    const auto n = static_cast<int64_t>(group->tokens.size());
    double worst = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      worst = std::max(worst,
                       (kv.keys[l] - cache.keys(l)[0].narrow(1, p, n)).abs().max().item<double>());
      worst = std::max(
          worst, (kv.values[l] - cache.values(l)[0].narrow(1, p, n)).abs().max().item<double>());
    }
    qInfo("group KV vs plain prefill of prefix + members: max |diff| %.2e", worst);
    QVERIFY2(worst < 1e-4, qPrintable(QString::number(worst)));
    // The group's tokens are its members' tokens, in order: the prompt reads the same text.
    QCOMPARE(hp.ids().size(), hp.trained_order_ids.size());
  }

  void groupingSpecsAreParsed() {
    QCOMPARE(cli::parse_household_grouping("blocks:64").block_tokens, int64_t{64});
    QCOMPARE(cli::parse_household_grouping("segments").name(), std::string("segments"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, cli::parse_household_grouping("blocks:0"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, cli::parse_household_grouping("groups"));
  }
};

QTEST_APPLESS_MAIN(TestKeepGrouping)
#include "test_keep_grouping.moc"
