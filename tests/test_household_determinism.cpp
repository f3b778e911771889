// Determinism: a seed fixes the world, the session's tasks and the expert's trajectory (the
// seeds are the evaluation split); different seeds give different households.
#include <QtTest>

#include <set>

#include "core/env/expert_planner.h"
#include "core/env/household_generator.h"
#include "core/env/household_session.h"

using namespace engram::env;

namespace {

std::string describe_world(const World& w) {
  std::string s = w.agent.room + "\n";
  for (const Thing& t : w.things)
    s += t.id + ">" + t.parent + "@" + t.room + (t.locked ? " locked" : "") +
         (t.dirty ? " dirty" : "") + " " + temperature_name(t.temperature) +
         (t.known ? " known" : "") + "\n";
  return s;
}

std::string describe_tasks(const std::vector<Task>& tasks) {
  std::string s;
  for (const Task& t : tasks)
    s += t.instruction() + "\n";
  return s;
}

std::vector<std::string> expert_trajectory(uint64_t seed) {
  HouseholdSession session({seed, 4, 60});
  std::vector<std::string> actions;
  while (!session.finished()) {
    const std::optional<Action> a = expert_next_action(session.world(), *session.current_task());
    if (!a) {
      session.abandon_task();
      continue;
    }
    actions.push_back(to_string(*a));
    session.step(*a);
  }
  return actions;
}

}  // namespace

class HouseholdDeterminismTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void sameSeedSameWorld() {
    for (uint64_t seed : {0ull, 1ull, 42ull, 123456789ull})
      QCOMPARE(describe_world(generate_world(seed)), describe_world(generate_world(seed)));
  }

  void sameSeedSameTasksAndTrajectory() {
    for (uint64_t seed : {3ull, 17ull, 99ull}) {
      HouseholdSession a({seed, 5, 60}), b({seed, 5, 60});
      QCOMPARE(describe_tasks(a.tasks()), describe_tasks(b.tasks()));
      QCOMPARE(expert_trajectory(seed), expert_trajectory(seed));
    }
  }

  void differentSeedsDiffer() {
    std::set<std::string> worlds, task_lists;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      worlds.insert(describe_world(generate_world(seed)));
      task_lists.insert(describe_tasks(HouseholdSession({seed, 5, 60}).tasks()));
    }
    QCOMPARE(worlds.size(), size_t{20});
    QCOMPARE(task_lists.size(), size_t{20});
    QVERIFY(expert_trajectory(5) != expert_trajectory(6));
  }

  void everyWorldHasTheRoomsAndAKeyedSafe() {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      const World w = generate_world(seed);
      QCOMPARE(w.rooms.size(), size_t{5});
      int safes = 0, safe_keys = 0;
      for (const Thing& t : w.things) {
        if (t.type == "safe") {
          ++safes;
          QVERIFY(t.locked);
          for (const Thing& k : w.things)
            safe_keys += k.opens == t.id ? 1 : 0;
        }
      }
      QCOMPARE(safes, 1);
      QCOMPARE(safe_keys, 1);
    }
  }
};

QTEST_GUILESS_MAIN(HouseholdDeterminismTest)
#include "test_household_determinism.moc"
