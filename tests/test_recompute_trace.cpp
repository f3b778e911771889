// The recompute trace the importance panel reads (core/policies/recompute_trace.h): a step built
// from a hand-made layout and plan has the right units, per-layer sets, hops and edges; a trace
// survives a write and a read unchanged; damaged files are refused with an error naming the file
// and the field; the fixture engram-cli wrote (tests/data/keep-trace/) reads and keeps the
// runner's contract.
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "core/policies/importance_propagation.h"
#include "core/policies/recompute_trace.h"

using namespace engram;

namespace {

// Figure 6's chain (as tests/test_keep.cpp): the query looks at the door, the door at the key,
// the key at the table.
UnitAttention door_key_table() {
  UnitAttention a;
  a.units = {0, 1, 2, 3, 4};
  a.from_query = {0.05, 0.10, 0.50, 0.20, 0.15};
  a.from_unit = {
      {0.90, 0.00, 0.00, 0.00, 0.00},  // table
      {0.70, 0.25, 0.00, 0.00, 0.00},  // key -> table
      {0.05, 0.60, 0.30, 0.00, 0.00},  // door -> key
      {0.02, 0.02, 0.05, 0.80, 0.00},  // sofa
      {0.02, 0.02, 0.05, 0.02, 0.85},  // lamp
  };
  return a;
}

std::vector<TraceUnitInfo> infos() {
  return {{"table_1", "object", "a table in the kitchen", "static", 3},
          {"key_2", "object", "a key\non the table", "dynamic", 1},
          {"door_3", "object", std::string(80, 'd'), "dynamic", 1},
          {"sofa_4", "object", "a sofa", "segment", 1},
          {"lamp_5", "object", "a lamp", "segment", 1}};
}

// BOS | table(2) key(3) door(2) sofa(1) lamp(2) | query(2); rows 0..12.
AssembledLayout layout() {
  return assemble_layout(1, {2, 3, 2, 1, 2}, 2);
}

// Layer 0 all units, layer 1 the chain KEEP found, layer 2 the table and one row of the door
// (a token-level policy's partial unit).
RecomputePlan plan(const ImportanceResult& keep) {
  const AssembledLayout l = layout();
  RecomputePlan p;
  std::vector<int64_t> all = l.all_unit_rows();
  for (int64_t q : l.query_rows())
    all.push_back(q);
  std::vector<int64_t> chain = l.rows_of_units(keep.selected);
  chain.push_back(11);
  chain.push_back(12);
  p.rows = {all, chain, {1, 2, 6, 11, 12}};
  p.hops = {keep.hops, {}};
  p.attention = {door_key_table(), {}};
  return p;
}

RecomputeTrace two_steps() {
  const ImportanceResult keep = propagate_importance(door_key_table(), 3);
  RecomputeTrace t;
  t.model = "hand-made";
  for (int64_t s = 0; s < 2; ++s) {
    std::vector<TraceUnitInfo> u = infos();
    if (s == 1) u[1].group = "static";  // the key settled
    TraceStep step = make_trace_step(layout(), plan(keep), u);
    step.step = 10 + s;
    step.episode = 1;
    step.method = "keep";
    step.spec = "keep:mean=0.15";
    t.steps.push_back(std::move(step));
  }
  return t;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message read_recompute_trace throws for `path`, or "" when it reads.
std::string read_error(const std::filesystem::path& path) {
  try {
    read_recompute_trace(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

class RecomputeTraceTest : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  std::filesystem::path file(const char* name) const {
    return std::filesystem::path(dir_.path().toStdString()) / name;
  }

 private Q_SLOTS:
  void stepFromLayoutAndPlan() {
    const ImportanceResult keep = propagate_importance(door_key_table(), 3);
    QCOMPARE(keep.selected, (std::vector<int64_t>{0, 1, 2}));
    const TraceStep s = make_trace_step(layout(), plan(keep), infos());
    QCOMPARE(s.prefix_tokens, int64_t(1));
    QCOMPARE(s.query_tokens, int64_t(2));
    QCOMPARE(s.total_tokens, int64_t(13));
    QCOMPARE(s.units.size(), size_t(5));
    QCOMPARE(s.units[1].key, std::string("key_2"));
    QCOMPARE(s.units[1].label, std::string("a key on the table"));  // one line
    QCOMPARE(s.units[1].begin, int64_t(3));
    QCOMPARE(s.units[1].tokens, int64_t(3));
    QCOMPARE(s.units[0].group, std::string("static"));
    QCOMPARE(s.units[0].members, int64_t(3));
    QVERIFY(s.units[2].label.size() < 80);  // cut
    QCOMPARE(s.layers.size(), size_t(3));
    QCOMPARE(s.layers[0].units, (std::vector<int64_t>{0, 1, 2, 3, 4}));
    QCOMPARE(s.layers[0].unit_rows, (std::vector<int64_t>{2, 3, 2, 1, 2}));
    QCOMPARE(s.layers[0].rows, int64_t(12));
    QVERIFY(s.layers[0].query);
    QCOMPARE(s.layers[1].units, (std::vector<int64_t>{0, 1, 2}));
    QCOMPARE(s.layers[2].units, (std::vector<int64_t>{0, 2}));
    QCOMPARE(s.layers[2].unit_rows, (std::vector<int64_t>{2, 1}));
    // Layer 0 holds the hops that chose layer 1, and the edges they were computed from.
    QCOMPARE(s.layers[0].hops.size(), keep.hops.size());
    QCOMPARE(s.layers[0].hops.back().relevant, keep.hops.back().relevant);
    QCOMPARE(s.layers[0].hops.front().scores, keep.hops.front().scores);
    QCOMPARE(s.layers[0].attention.from_unit[2][1], 0.60);  // door -> key
    QVERIFY(s.layers[2].hops.empty());
    QVERIFY(s.layers[2].attention.units.empty());

    // A query row missing from a layer is reported as such, not assumed.
    RecomputePlan no_query = plan(keep);
    no_query.rows[2] = {1, 2};
    QVERIFY(!make_trace_step(layout(), no_query, infos()).layers[2].query);
  }

  void stepRefusesWhatDoesNotFit() {
    const ImportanceResult keep = propagate_importance(door_key_table(), 3);
    std::vector<TraceUnitInfo> four = infos();
    four.pop_back();
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, make_trace_step(layout(), plan(keep), four));
    RecomputePlan more_hops = plan(keep);
    more_hops.hops.resize(4);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, make_trace_step(layout(), more_hops, infos()));
  }

  void roundTrip() {
    const RecomputeTrace t = two_steps();
    const auto path = file("trace.json");
    write_recompute_trace(path, t);
    const RecomputeTrace back = read_recompute_trace(path);
    QCOMPARE(back.model, t.model);
    QCOMPARE(back.steps.size(), size_t(2));
    QCOMPARE(back.steps[1].step, int64_t(11));
    QCOMPARE(back.steps[1].units[1].group, std::string("static"));
    QCOMPARE(back.steps[0].units[1].group, std::string("dynamic"));
    QCOMPARE(back.steps[0].layers[1].units, (std::vector<int64_t>{0, 1, 2}));
    QCOMPARE(back.steps[0].layers[0].hops.back().scores, t.steps[0].layers[0].hops.back().scores);
    QCOMPARE(back.steps[0].layers[0].attention.from_unit, door_key_table().from_unit);
    QCOMPARE(back.steps[0].units[2].label, t.steps[0].units[2].label);
    QCOMPARE(nlohmann::json(back), nlohmann::json(t));  // every field

    // Overwritten in place, and no temporary left beside it.
    RecomputeTrace one = t;
    one.steps.pop_back();
    write_recompute_trace(path, one);
    QCOMPARE(read_recompute_trace(path).steps.size(), size_t(1));
    int files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path.parent_path()))
      ++files;
    QCOMPARE(files, 1);
  }

  void badFilesAreClearErrors() {
    const auto good = nlohmann::json(two_steps());

    const auto missing = file("missing.json");
    QVERIFY(contains(read_error(missing), "missing.json: cannot be opened"));

    const auto cut = file("cut.json");
    write_text(cut, good.dump().substr(0, 200));
    const std::string not_json = read_error(cut);
    QVERIFY2(contains(not_json, "cut.json: not JSON (byte "), not_json.c_str());

    nlohmann::json no_units = good;
    no_units["steps"][1]["layers"][2].erase("units");
    write_text(file("field.json"), no_units.dump());
    const std::string field = read_error(file("field.json"));
    QVERIFY2(contains(field, "field.json: steps[1].layers[2].units: missing"), field.c_str());

    nlohmann::json typed = good;
    typed["steps"][0]["layers"][0]["rows"] = "twelve";
    write_text(file("typed.json"), typed.dump());
    const std::string type = read_error(file("typed.json"));
    QVERIFY2(contains(type, "steps[0].layers[0].rows: expected an integer"), type.c_str());

    nlohmann::json ragged = good;
    ragged["steps"][0]["layers"][0]["attention"]["from_unit"][3].erase(0);
    write_text(file("ragged.json"), ragged.dump());
    const std::string square = read_error(file("ragged.json"));
    QVERIFY2(contains(square, "attention.from_unit: expected a square matrix"), square.c_str());

    nlohmann::json other = good;
    other["format"] = "engram-trace";
    write_text(file("other.json"), other.dump());
    QVERIFY(
        contains(read_error(file("other.json")), "format: expected \"engram-recompute-trace\""));

    nlohmann::json newer = good;
    newer["version"] = 2;
    write_text(file("newer.json"), newer.dump());
    QVERIFY(contains(read_error(file("newer.json")), "version: 2 is not supported"));
  }

  void labelsAreOneShortLine() {
    QCOMPARE(trace_label("  a\tb\nc  "), std::string("a b c"));
    QCOMPARE(trace_label("\n\n"), std::string());
    // 2-byte characters: the cut never splits one.
    std::string accents;
    for (int i = 0; i < 50; ++i)
      accents += "é";
    const std::string label = trace_label(accents);
    QCOMPARE(label, accents.substr(0, kTraceLabelChars) + "…");
    QVERIFY(QString::fromStdString(label).toStdString() == label);  // valid UTF-8
    const std::string odd = trace_label("x" + accents);
    QCOMPARE(odd, "x" + accents.substr(0, kTraceLabelChars - 2) + "…");
  }

  // The trace `engram-cli eval keep --trace` wrote on engram-tiny (tests/data/keep-trace/).
  void fixtureKeepsTheRunnersContract() {
    const auto path = std::filesystem::path(ENGRAM_TEST_DATA) / "keep-trace" / "engram-tiny.json";
    if (!std::filesystem::exists(path)) QSKIP("no fixture trace");
    const RecomputeTrace t = read_recompute_trace(path);
    QVERIFY(!t.steps.empty());
    for (const TraceStep& s : t.steps) {
      QCOMPARE(s.method, std::string("keep"));
      QVERIFY(!s.units.empty());
      QVERIFY(s.layers.size() > 1);
      QCOMPARE(s.layers[0].units.size(), s.units.size());  // layer 0 recomputes every unit
      for (size_t l = 0; l < s.layers.size(); ++l) {
        const TraceLayer& layer = s.layers[l];
        QVERIFY(layer.query);
        if (l > 0) {  // never grows
          const std::set<int64_t> before(s.layers[l - 1].units.begin(),
                                         s.layers[l - 1].units.end());
          for (int64_t u : layer.units)
            QVERIFY(before.count(u));
        }
        if (l + 1 == s.layers.size()) {
          QVERIFY(layer.hops.empty());
          continue;
        }
        QVERIFY(!layer.hops.empty());
        QCOMPARE(layer.attention.units, layer.units);  // candidates: the units recomputed here
        const std::set<int64_t> next(s.layers[l + 1].units.begin(), s.layers[l + 1].units.end());
        const std::set<int64_t> chosen(layer.hops.back().relevant.begin(),
                                       layer.hops.back().relevant.end());
        QCOMPARE(chosen, next);  // the last hop's relevant set is the next layer's units
        for (const ImportanceHop& h : layer.hops)
          QCOMPARE(h.scores.size(), layer.attention.units.size());
      }
    }
  }
};

QTEST_APPLESS_MAIN(RecomputeTraceTest)
#include "test_recompute_trace.moc"
