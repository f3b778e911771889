// Embodied memory: a segment's version bumps exactly when its text changes; keys are stable;
// the memory holds only what the agent has seen; examples never change.
#include <QtTest>

#include <map>
#include <set>

#include "core/env/embodied_memory.h"
#include "core/env/embodied_prompt.h"
#include "core/env/expert_planner.h"
#include "core/env/household_session.h"

using namespace engram::env;

class MemorySegmentsTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void versionBumpsOnlyWhenTextChanges() {
    EmbodiedMemory m;
    m.update({{"apple_1", "object", "apple_1: on countertop_1 | room temp"}}, 0);
    QCOMPARE(m.find("apple_1")->version, int64_t{1});
    m.update({{"apple_1", "object", "apple_1: on countertop_1 | room temp"}}, 1);
    QCOMPARE(m.find("apple_1")->version, int64_t{1});
    QCOMPARE(m.find("apple_1")->last_changed_step, int64_t{0});
    m.update({{"apple_1", "object", "apple_1: held | room temp"}}, 2);
    QCOMPARE(m.find("apple_1")->version, int64_t{2});
    QCOMPARE(m.find("apple_1")->last_changed_step, int64_t{2});
    m.update({}, 3);  // not mentioned: remembered as it was
    QCOMPARE(m.find("apple_1")->text, std::string("apple_1: held | room temp"));
    QCOMPARE(m.find("apple_1")->version, int64_t{2});
  }

  void staticKindsStayAPrefix() {
    EmbodiedMemory m;
    m.update({{"example_a", "example", "e"}, {"agent", "agent", "a"}, {"x_1", "object", "x"}}, 0);
    m.update({{"task_1", "history", "task 1 done"}, {"y_1", "object", "y"}}, 1);
    std::vector<std::string> keys;
    for (const MemorySegment& s : m.segments())
      keys.push_back(s.key);
    QCOMPARE(keys, (std::vector<std::string>{"example_a", "task_1", "agent", "x_1", "y_1"}));
  }

  // Over whole expert sessions: every version change matches a text change, and every text
  // change bumps the version by exactly one.
  void sessionVersionsTrackContent() {
    for (uint64_t seed = 0; seed < 10; ++seed) {
      HouseholdSession session({seed, 5, 60});
      std::map<std::string, MemorySegment> last;
      for (const MemorySegment& s : session.memory())
        last[s.key] = s;
      int object_changes = 0;
      while (!session.finished()) {
        const std::optional<Action> a =
            expert_next_action(session.world(), *session.current_task());
        QVERIFY(a.has_value());
        session.step(*a);
        std::set<std::string> seen_keys;
        for (const MemorySegment& s : session.memory()) {
          QVERIFY2(seen_keys.insert(s.key).second, s.key.c_str());
          auto it = last.find(s.key);
          if (it == last.end()) {
            QCOMPARE(s.version, int64_t{1});
            QCOMPARE(s.last_changed_step, session.step_count());
          } else if (it->second.text == s.text) {
            QCOMPARE(s.version, it->second.version);
          } else {
            QCOMPARE(s.version, it->second.version + 1);
            QCOMPARE(s.last_changed_step, session.step_count());
            object_changes += s.kind == "object" ? 1 : 0;
            QVERIFY2(s.kind != "example" && s.kind != "history", s.key.c_str());
          }
          last[s.key] = s;
        }
        QCOMPARE(last.size(), session.memory().size());  // nothing forgotten
      }
      QVERIFY(object_changes > 0);
    }
  }

  void memoryHoldsOnlySeenThings() {
    HouseholdSession session({11, 5, 60});
    const World& w = session.world();
    int unseen = 0;
    for (const Thing& t : w.things) {
      const bool in_memory = session.memory_book().find(t.id) != nullptr;
      QCOMPARE(in_memory, t.known);
      unseen += t.known ? 0 : 1;
    }
    QVERIFY(unseen > 0);  // memory is not the world state
    const MemorySegment* agent = session.memory_book().find("agent");
    QVERIFY(agent && agent->text.rfind("agent: in " + w.agent.room, 0) == 0);
  }

  void recordsAreShortStructuredLines() {
    HouseholdSession session({4, 5, 60});
    for (const MemorySegment& s : session.memory()) {
      QVERIFY(s.text.find('\n') == std::string::npos);
      if (s.kind == "object") {
        QVERIFY(s.text.rfind(s.key + ": ", 0) == 0);
        QVERIFY(s.text.size() < 80);
      }
    }
  }

  void promptEndsWithTheQuery() {
    HouseholdSession session({2, 5, 60});
    const std::optional<Action> a = expert_next_action(session.world(), *session.current_task());
    session.step(*a);
    const EmbodiedPrompt p =
        build_embodied_prompt(session.memory(), *session.current_task(), session.task_actions());
    QCOMPARE(p.parts.back().key, std::string("query"));
    QVERIFY(p.text.size() > 100);
    QVERIFY(p.text.substr(p.text.size() - 5) == "next:");
    QVERIFY(p.text.find("task: " + session.current_task()->instruction()) != std::string::npos);
    QVERIFY(p.text.find("history: " + to_string(*a)) != std::string::npos);
    int examples = 0;
    std::string joined;
    for (const PromptPart& part : p.parts) {
      examples += part.kind == "example" ? 1 : 0;
      joined += part.text;
    }
    QCOMPARE(examples, 2);
    QCOMPARE(joined, p.text);
  }
};

QTEST_GUILESS_MAIN(MemorySegmentsTest)
#include "test_memory_segments.moc"
