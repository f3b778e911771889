// Embodied data export: every line is a JSON object with the documented fields, the target is a
// valid action text, and the same options give the same bytes.
#include <QtTest>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/env/embodied_export.h"
#include "core/env/household_action.h"

using namespace engram::env;

class EnvExportTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void linesAreValidAndComplete() {
    EmbodiedExportOptions o;
    o.first_seed = 100;
    o.sessions = 8;
    std::ostringstream out;
    const EmbodiedExportStats stats = export_embodied(o, out);
    QVERIFY(stats.lines > 8 * 5 * 3);
    QCOMPARE(stats.tasks, int64_t{40});
    QCOMPARE(stats.tasks_solved, stats.tasks);
    std::istringstream in(out.str());
    std::string line;
    int64_t n = 0;
    int64_t last_step = -1;
    std::set<std::string> types;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      for (const char* key : {"prompt", "target", "task_type", "seed", "step", "task_index"})
        QVERIFY2(j.contains(key), key);
      const std::string target = j["target"];
      const std::optional<Action> a = parse_action(target);
      QVERIFY2(a && to_string(*a) == target, target.c_str());
      const std::string prompt = j["prompt"];
      QVERIFY(prompt.size() > 5 && prompt.substr(prompt.size() - 5) == "next:");
      QVERIFY(j["seed"].get<uint64_t>() >= 100 && j["seed"].get<uint64_t>() < 108);
      const int64_t step = j["step"];
      QVERIFY(step == last_step + 1 || step == 0);
      last_step = step;
      types.insert(j["task_type"].get<std::string>());
      ++n;
    }
    QCOMPARE(n, stats.lines);
    QVERIFY(types.size() >= 5);
    // ~3.5 characters a token for this text: well inside the bundled model's 4,096.
    QVERIFY(stats.max_prompt_chars < 6000);
  }

  // A detour step records the expert's action for the state but executes something else, so
  // the history of the next line does not end with the previous line's target.
  void detoursTeachRecoveryAndStaySolvable() {
    EmbodiedExportOptions o;
    o.first_seed = 200;
    o.sessions = 6;
    o.detour_probability = 0.2;
    std::ostringstream out;
    const EmbodiedExportStats stats = export_embodied(o, out);
    QVERIFY(stats.detours > 0);
    QVERIFY(stats.tasks_solved >= stats.tasks - 1);
    std::istringstream in(out.str());
    std::string line, previous_target;
    int64_t departures = 0, last_step = -1;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::string prompt = j["prompt"];
      const int64_t step = j["step"];
      const std::string history = prompt.substr(prompt.rfind("history: ") + 9);
      if (step == last_step + 1 && history.rfind("none", 0) != 0 &&
          history.find(previous_target + "\nnext:") == std::string::npos &&
          history.find(previous_target + " [failed") == std::string::npos)
        ++departures;
      previous_target = j["target"];
      last_step = step;
    }
    QVERIFY2(departures > 0, "no line shows a state reached by a detour");
    EmbodiedExportOptions plain = o;
    plain.detour_probability = 0;
    std::ostringstream plain_out;
    QCOMPARE(export_embodied(plain, plain_out).detours, int64_t{0});
  }

  void sameOptionsSameBytes() {
    EmbodiedExportOptions o;
    o.sessions = 3;
    std::ostringstream a, b;
    export_embodied(o, a);
    export_embodied(o, b);
    QCOMPARE(a.str(), b.str());
  }
};

QTEST_GUILESS_MAIN(EnvExportTest)
#include "test_env_export.moc"
