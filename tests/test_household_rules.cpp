// Household rules: each action's effect, each action's refusals (which change nothing), the
// text form of actions, and what the agent gets to see.
#include <QtTest>

#include "core/env/household_world.h"

using namespace engram::env;

namespace {

Thing fixed(const std::string& id, const std::string& room) {
  Thing t;
  t.id = id;
  t.type = type_of_id(id);
  t.room = room;
  return t;
}

Thing item(const std::string& id, const std::string& parent) {
  Thing t;
  t.id = id;
  t.type = type_of_id(id);
  t.parent = parent;
  return t;
}

// kitchen: fridge, microwave, sink (dirty mug), countertop (apple, knife, bowl), closed drawer
// (key to the study). living_room: sofa, door_1 (locked) to the study: desk, desk lamp, book.
World small_house() {
  World w;
  w.rooms = {{"kitchen", "", false}, {"living_room", "", false}, {"study", "door_1", false}};
  for (const char* id : {"fridge_1", "microwave_1", "sink_basin_1", "countertop_1", "drawer_1"})
    w.things.push_back(fixed(id, "kitchen"));
  w.things.push_back(fixed("sofa_1", "living_room"));
  Thing door = fixed("door_1", "living_room");
  door.leads_to = "study";
  door.locked = true;
  w.things.push_back(door);
  w.things.push_back(fixed("desk_1", "study"));
  w.things.push_back(fixed("desk_lamp_1", "study"));
  w.things.push_back(item("apple_1", "countertop_1"));
  w.things.push_back(item("knife_1", "countertop_1"));
  w.things.push_back(item("bowl_1", "countertop_1"));
  Thing mug = item("mug_1", "sink_basin_1");
  mug.dirty = true;
  w.things.push_back(mug);
  Thing key = item("key_1", "drawer_1");
  key.opens = "door_1";
  w.things.push_back(key);
  w.things.push_back(item("book_1", "desk_1"));
  w.agent.room = "kitchen";
  w.begin();
  return w;
}

bool run(World& w, const std::string& text) {
  std::string error;
  const std::optional<Action> a = parse_action(text, &error);
  if (!a) qFatal("unparsable action '%s': %s", text.c_str(), error.c_str());
  return w.apply(*a).ok;
}

// A refused action must leave the world exactly as it was.
void expect_refused(World& w, const std::string& text) {
  const std::string before = [&] {
    std::string s = w.agent.room + "|" + w.agent.at + "|" + w.agent.holding;
    for (const Thing& t : w.things)
      s += t.id + t.parent + (t.open ? "o" : "c") + (t.locked ? "l" : "") + (t.on ? "n" : "") +
           (t.dirty ? "d" : "") + (t.sliced ? "s" : "") + temperature_name(t.temperature) +
           (t.known ? "k" : "");
    return s;
  }();
  const std::optional<Action> a = parse_action(text);
  QVERIFY2(a.has_value(), text.c_str());
  const ActionResult r = w.apply(*a);
  QVERIFY2(!r.ok, text.c_str());
  QVERIFY2(!r.message.empty(), text.c_str());
  std::string after = w.agent.room + "|" + w.agent.at + "|" + w.agent.holding;
  for (const Thing& t : w.things)
    after += t.id + t.parent + (t.open ? "o" : "c") + (t.locked ? "l" : "") + (t.on ? "n" : "") +
             (t.dirty ? "d" : "") + (t.sliced ? "s" : "") + temperature_name(t.temperature) +
             (t.known ? "k" : "");
  QCOMPARE(after, before);
}

}  // namespace

class HouseholdRulesTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void actionTextRoundTrips() {
    const std::optional<Action> a = parse_action("Put the apple in the fridge.");
    QVERIFY(a.has_value());
    QCOMPARE(int(a->verb), int(Verb::kPut));
    QCOMPARE(a->target, std::string("apple"));
    QCOMPARE(a->destination, std::string("fridge"));
    QCOMPARE(to_string(*a), std::string("put apple in fridge"));
    QCOMPARE(to_string(*parse_action("put apple_1 in countertop_2")),
             std::string("put apple_1 on countertop_2"));
    QCOMPARE(to_string(*parse_action("find sink basin")), std::string("find sink_basin"));
    for (const char* s :
         {"go to kitchen", "find apple_1", "pick up apple_1", "put mug_1 in cabinet_2",
          "open drawer_1", "close drawer_1", "slice apple_1", "turn on desk_lamp_1",
          "turn off desk_lamp_1", "heat mug_1", "cool apple_1", "clean mug_1"})
      QCOMPARE(to_string(*parse_action(s)), std::string(s));
    std::string error;
    QVERIFY(!parse_action("jump over the sofa", &error));
    QVERIFY(error.find("jump") != std::string::npos);
    QVERIFY(!parse_action("put apple", &error));
    QVERIFY(!parse_action("pick up", &error));
  }

  void perceptionRevealsOnlyWhatIsVisible() {
    World w = small_house();
    QVERIFY(w.find("apple_1")->known);
    QVERIFY(w.find("fridge_1")->known);
    QVERIFY(!w.find("key_1")->known);  // in the closed drawer
    QVERIFY(!w.find("sofa_1")->known);
    QVERIFY(!w.find("book_1")->known);
    expect_refused(w, "find key_1");  // unseen things cannot be named
    expect_refused(w, "find sofa_1");
  }

  void findWalksToThePlace() {
    World w = small_house();
    QVERIFY(run(w, "find apple_1"));
    QCOMPARE(w.agent.at, std::string("countertop_1"));
    QVERIFY(run(w, "go to living_room"));
    QCOMPARE(w.agent.room, std::string("living_room"));
    QVERIFY(w.agent.at.empty());
    QVERIFY(w.find("sofa_1")->known);
    QVERIFY(run(w, "find fridge_1"));  // walks back to the kitchen
    QCOMPARE(w.agent.room, std::string("kitchen"));
    QCOMPARE(w.agent.at, std::string("fridge_1"));
    expect_refused(w, "go to kitchen");
    expect_refused(w, "go to garage");
    expect_refused(w, "find unicorn");
  }

  void pickUpAndPut() {
    World w = small_house();
    expect_refused(w, "pick up apple_1");  // not there yet
    QVERIFY(run(w, "find apple"));
    expect_refused(w, "pick up countertop_1");
    QVERIFY(run(w, "pick up apple"));
    QCOMPARE(w.agent.holding, std::string("apple_1"));
    QVERIFY(w.find("apple_1")->parent.empty());
    expect_refused(w, "pick up knife_1");      // hands full
    QVERIFY(run(w, "put apple_1 in bowl_1"));  // a container where the agent stands
    QCOMPARE(w.find("apple_1")->parent, std::string("bowl_1"));
    QVERIFY(run(w, "pick up bowl_1"));
    QCOMPARE(w.room_of(*w.find("apple_1")), std::string("kitchen"));
    QVERIFY(!w.visible(*w.find("apple_1")));
    QVERIFY(run(w, "find fridge_1"));
    expect_refused(w, "put bowl_1 in fridge_1");  // closed
    QVERIFY(run(w, "open fridge_1"));
    QVERIFY(run(w, "put bowl_1 in fridge_1"));
    QCOMPARE(w.place_of(*w.find("apple_1")), std::string("fridge_1"));
    QVERIFY(run(w, "close fridge_1"));
    expect_refused(w, "pick up apple_1");              // behind a closed door
    expect_refused(w, "put apple_1 on countertop_1");  // not holding it
  }

  void putRefusesWhatDoesNotFit() {
    World w = small_house();
    QVERIFY(run(w, "find knife_1"));
    QVERIFY(run(w, "pick up knife_1"));
    QVERIFY(run(w, "find microwave_1"));
    QVERIFY(run(w, "open microwave_1"));
    expect_refused(w, "put knife_1 in microwave_1");   // only food and dishes
    expect_refused(w, "put knife_1 on countertop_1");  // not standing there
  }

  void openCloseAndLocks() {
    World w = small_house();
    expect_refused(w, "open drawer_1");  // not at it
    QVERIFY(run(w, "find drawer_1"));
    expect_refused(w, "close drawer_1");
    QVERIFY(run(w, "open drawer_1"));
    QVERIFY(w.find("key_1")->known);
    QVERIFY(w.find("drawer_1")->contents_seen);
    expect_refused(w, "open drawer_1");
    expect_refused(w, "open countertop_1");
    QVERIFY(run(w, "go to living_room"));
    QVERIFY(w.find("door_1")->known);
    expect_refused(w, "go to study");  // behind a closed door
    QVERIFY(run(w, "find door_1"));
    expect_refused(w, "open door_1");  // locked, no key in hand
    QVERIFY(run(w, "find key_1"));
    QVERIFY(run(w, "pick up key_1"));
    QVERIFY(run(w, "find door_1"));
    QVERIFY(run(w, "open door_1"));
    QVERIFY(!w.find("door_1")->locked);
    QVERIFY(run(w, "close door_1"));
    QVERIFY(run(w, "put key_1 on sofa_1") == false);  // not at the sofa
    QVERIFY(run(w, "find sofa_1"));
    QVERIFY(run(w, "put key_1 on sofa_1"));
    QVERIFY(run(w, "find door_1"));
    QVERIFY(run(w, "open door_1"));  // unlocked for good
    QVERIFY(run(w, "go to study"));
    QVERIFY(w.find("book_1")->known);
  }

  void sliceNeedsAKnifeAndTheObjectAtHand() {
    World w = small_house();
    QVERIFY(run(w, "find apple_1"));
    expect_refused(w, "slice apple_1");  // no knife
    QVERIFY(run(w, "pick up knife_1"));
    expect_refused(w, "slice bowl_1");  // not sliceable
    QVERIFY(run(w, "slice apple_1"));
    QVERIFY(w.find("apple_1")->sliced);
    expect_refused(w, "slice apple_1");
  }

  void heatCoolCleanNeedTheStation() {
    World w = small_house();
    QVERIFY(run(w, "find apple_1"));
    expect_refused(w, "heat apple_1");  // not holding
    QVERIFY(run(w, "pick up apple_1"));
    expect_refused(w, "heat apple_1");  // not at a microwave
    QVERIFY(run(w, "find microwave_1"));
    QVERIFY(run(w, "heat apple_1"));
    QCOMPARE(int(w.find("apple_1")->temperature), int(Temperature::kHot));
    expect_refused(w, "heat apple_1");
    expect_refused(w, "cool apple_1");
    QVERIFY(run(w, "find fridge_1"));
    QVERIFY(run(w, "cool apple_1"));  // a closed fridge still cools: skill-level action
    QCOMPARE(int(w.find("apple_1")->temperature), int(Temperature::kCold));
    expect_refused(w, "clean apple_1");  // food is not cleanable
    QVERIFY(run(w, "find countertop_1"));
    QVERIFY(run(w, "put apple_1 on countertop_1"));
    QVERIFY(run(w, "find mug_1"));
    QVERIFY(run(w, "pick up mug_1"));
    QVERIFY(run(w, "clean mug_1"));  // picked up at the sink, cleaned there
    QVERIFY(!w.find("mug_1")->dirty);
    expect_refused(w, "clean mug_1");
  }

  void lampsTurnOnAndOff() {
    World w = small_house();
    w.find("door_1")->locked = false;
    w.find("door_1")->open = true;
    QVERIFY(run(w, "go to study"));
    expect_refused(w, "turn on desk_lamp_1");  // not at it
    QVERIFY(run(w, "find desk_lamp_1"));
    expect_refused(w, "turn off desk_lamp_1");
    QVERIFY(run(w, "turn on desk_lamp_1"));
    QVERIFY(w.find("desk_lamp_1")->on);
    expect_refused(w, "turn on desk_lamp_1");
    expect_refused(w, "turn on desk_1");
    QVERIFY(run(w, "turn off desk_lamp_1"));
    QVERIFY(!w.find("desk_lamp_1")->on);
  }
};

QTEST_GUILESS_MAIN(HouseholdRulesTest)
#include "test_household_rules.moc"
