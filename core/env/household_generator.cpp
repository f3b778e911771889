#include "core/env/household_generator.h"

#include <map>

#include "core/env/seeded_rng.h"

namespace engram::env {
namespace {

struct Builder {
  World world;
  std::map<std::string, int> counters;
  SeededRng& rng;

  explicit Builder(SeededRng& r) : rng(r) {}

  Thing& add(const std::string& type, const std::string& room, const std::string& parent = "") {
    Thing t;
    t.id = type + "_" + std::to_string(++counters[type]);
    t.type = type;
    t.room = room;
    t.parent = parent;
    world.things.push_back(t);
    return world.things.back();
  }

  void fixtures(const std::string& room, const std::string& type, int lo, int hi) {
    const int64_t n = rng.between(lo, hi);
    for (int64_t i = 0; i < n; ++i)
      add(type, room);
  }

  // Fixed receptacles of the room that can hold the type, closed ones too.
  std::vector<std::string> holders(const std::string& room, const std::string& type,
                                   const std::vector<std::string>& allowed) {
    std::vector<std::string> out;
    for (const Thing& t : world.things) {
      if (t.room != room || !t.parent.empty()) continue;
      const TypeInfo& ri = type_info(t.type);
      if (!ri.receptacle || t.type == "safe") continue;
      bool ok = allowed.empty();
      for (const std::string& a : allowed)
        ok = ok || a == t.type;
      if (ok && receptacle_accepts(ri, type_info(type))) out.push_back(t.id);
    }
    return out;
  }

  void scatter(const std::string& room, const std::vector<std::string>& types,
               const std::vector<std::string>& allowed, int max_each) {
    for (const std::string& type : types) {
      const int64_t n = rng.between(0, max_each);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<std::string> where = holders(room, type, allowed);
        if (where.empty()) continue;
        Thing& t = add(type, room, rng.pick(where));
        const TypeInfo& ti = type_info(type);
        if (ti.cleanable) t.dirty = rng.chance(ti.category == Category::kDish ? 0.5 : 0.3);
        if (t.parent.rfind("fridge", 0) == 0 && ti.coolable) t.temperature = Temperature::kCold;
      }
    }
  }
};

}  // namespace

World generate_world(uint64_t seed) {
  SeededRng rng(seed ^ 0x486F757365686F6Cull);  // "Househol": keeps world draws apart from tasks'
  Builder b(rng);
  World& w = b.world;
  w.rooms = {{"kitchen", "", false},
             {"living_room", "", false},
             {"bedroom", "", false},
             {"bathroom", "", false},
             {"study", "door_1", false}};
  // Fixed things first, so that their ids do not depend on how many portable things exist.
  b.fixtures("kitchen", "fridge", 1, 1);
  b.fixtures("kitchen", "microwave", 1, 1);
  b.fixtures("kitchen", "sink_basin", 1, 1);
  b.fixtures("kitchen", "countertop", 1, 2);
  b.fixtures("kitchen", "dining_table", 1, 1);
  b.fixtures("kitchen", "cabinet", 2, 3);
  b.fixtures("kitchen", "drawer", 1, 2);
  b.fixtures("living_room", "sofa", 1, 1);
  b.fixtures("living_room", "coffee_table", 1, 1);
  b.fixtures("living_room", "side_table", 1, 1);
  b.fixtures("living_room", "tv_stand", 0, 1);
  b.fixtures("living_room", "cabinet", 0, 1);
  b.fixtures("living_room", "drawer", 1, 1);
  b.fixtures("living_room", "floor_lamp", 1, 1);
  b.fixtures("bedroom", "bed", 1, 1);
  b.fixtures("bedroom", "dresser", 1, 1);
  b.fixtures("bedroom", "drawer", 2, 3);
  b.fixtures("bedroom", "desk", 1, 1);
  b.fixtures("bedroom", "desk_lamp", 1, 1);
  b.fixtures("bedroom", "shelf", 0, 1);
  b.fixtures("bathroom", "sink_basin", 1, 1);
  b.fixtures("bathroom", "countertop", 1, 1);
  b.fixtures("bathroom", "cabinet", 1, 2);
  b.fixtures("study", "desk", 1, 1);
  b.fixtures("study", "shelf", 1, 1);
  b.fixtures("study", "drawer", 1, 1);
  b.fixtures("study", "desk_lamp", 0, 1);
  const bool safe_in_study = rng.chance(0.5);
  Thing& safe = b.add("safe", safe_in_study ? "study" : "bedroom");
  safe.locked = true;
  const std::string safe_id = safe.id;
  Thing& door = b.add("door", "living_room");
  door.leads_to = "study";
  door.locked = rng.chance(0.6);
  const std::string door_id = door.id;
  const bool door_locked = door.locked;

  b.scatter("kitchen", {"apple", "tomato", "potato", "bread", "lettuce", "egg"},
            {"fridge", "countertop", "dining_table", "cabinet"}, 2);
  b.scatter("kitchen", {"mug", "cup", "bowl", "plate", "pot", "pan"},
            {"countertop", "dining_table", "cabinet", "sink_basin"}, 1);
  b.scatter("kitchen", {"knife", "butter_knife", "spoon", "fork", "spatula"},
            {"drawer", "countertop", "dining_table"}, 1);
  b.scatter(
      "living_room",
      {"remote_control", "keychain", "credit_card", "book", "vase", "statue", "box", "pillow"}, {},
      1);
  b.scatter("bedroom",
            {"book", "pen", "pencil", "cell_phone", "alarm_clock", "cd", "pillow", "mug", "laptop"},
            {}, 2);
  b.scatter("bathroom", {"soap_bar", "cloth", "spray_bottle", "tissue_box", "sponge", "candle"}, {},
            1);
  b.scatter("study", {"book", "pen", "pencil", "credit_card", "cd", "box", "laptop", "statue"}, {},
            1);
  const std::vector<std::string> valuables = {"watch", "credit_card", "cell_phone", "keychain"};
  const int64_t in_safe = rng.between(1, 2);
  for (int64_t i = 0; i < in_safe; ++i)
    b.add(rng.pick(valuables), "", safe_id);

  // Keys go in closed receptacles so that finding one is a memory (KEEP's "key in the drawer").
  auto hiding_places = [&](const std::vector<std::string>& rooms) {
    std::vector<std::string> out;
    for (const Thing& t : w.things)
      if ((t.type == "drawer" || t.type == "cabinet") && t.parent.empty())
        for (const std::string& r : rooms)
          if (t.room == r) out.push_back(t.id);
    return out;
  };
  const std::vector<std::string> outside = {"kitchen", "living_room", "bedroom", "bathroom"};
  if (door_locked) {
    Thing& k = b.add("key", "", rng.pick(hiding_places(outside)));
    k.opens = door_id;
  }
  const bool safe_key_in_study = safe_in_study ? false : rng.chance(0.5);
  Thing& sk = b.add(
      "key", "",
      rng.pick(hiding_places(safe_key_in_study ? std::vector<std::string>{"study"} : outside)));
  sk.opens = safe_id;

  w.agent.room = rng.pick(std::vector<std::string>{"kitchen", "living_room", "bedroom"});
  w.begin();
  return w;
}

}  // namespace engram::env
