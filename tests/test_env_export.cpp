// Embodied data export: every line is a JSON object with the documented fields, the target is a
// valid action text, the same options give the same bytes, and a planner can drive while the
// expert labels (DAgger).
#include <QtTest>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/env/embodied_export.h"
#include "core/env/expert_planner.h"
#include "core/env/household_action.h"
#include "core/env/household_session.h"

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

  // DAgger: the planner drives (here one that walks off to another room at every third step, the
  // kind of mistake a model makes); every line still holds the expert's action for the state
  // the planner led to, and the expert brings those states back on course.
  void aPlannerDrivesAndTheExpertLabels() {
    EmbodiedExportOptions o;
    o.first_seed = 300;
    o.sessions = 3;
    std::vector<std::string> expert_said;
    o.planner = [&](const HouseholdSession& s) {
      const std::optional<Action> expert = expert_next_action(s.world(), *s.current_task());
      expert_said.push_back(to_string(*expert));
      if (s.step_count() % 3 != 2) return *expert;
      for (const Room& r : s.world().rooms)
        if (r.name != s.world().agent.room) return Action{Verb::kGoTo, r.name, ""};
      return *expert;
    };
    std::ostringstream out;
    const EmbodiedExportStats stats = export_embodied(o, out);
    QCOMPARE(stats.planner_steps, stats.lines);  // planner_share 1: the planner takes every step
    // Every third step walks off (unless the expert happened to want that very room).
    QVERIFY(stats.planner_disagreements > 0 &&
            stats.planner_disagreements <= (stats.lines + 2) / 3);
    QVERIFY(stats.tasks_solved >= stats.tasks - 1);
    std::istringstream in(out.str());
    std::string line;
    size_t i = 0;
    while (std::getline(in, line)) {
      QVERIFY(i < expert_said.size());
      QCOMPARE(nlohmann::json::parse(line)["target"].get<std::string>(), expert_said[i++]);
    }
    QCOMPARE(i, expert_said.size());

    // A share of the steps: the rest are the expert's, and the same options give the same bytes.
    o.planner_share = 0.5;
    std::ostringstream half_a, half_b;
    const EmbodiedExportStats half = export_embodied(o, half_a);
    QVERIFY(half.planner_steps > 0 && half.planner_steps < half.lines);
    export_embodied(o, half_b);
    QCOMPARE(half_a.str(), half_b.str());
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
