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
