#include "core/env/expert_planner.h"

#include <algorithm>
#include <tuple>

namespace engram::env {
namespace {

using Next = std::optional<Action>;

Action act(Verb verb, std::string target, std::string destination = "") {
  return Action{verb, std::move(target), std::move(destination)};
}

// Each method returns the next action toward its goal, or nullopt when the goal already holds.
// Goals are recomputed from scratch every step, so the expert needs no plan state and recovers
// from any detour a person or a model took.
class Expert {
 public:
  Expert(const World& w, const Task& t) : w_(w), task_(t) {}

  Next run() {
    if (task_satisfied(w_, task_)) return std::nullopt;
    switch (task_.type) {
      case TaskType::kPickAndPlace:
      case TaskType::kPickTwoAndPlace:
        return transform_and_place(nullptr);
      case TaskType::kCleanAndPlace:
        return transform_and_place(&Expert::is_clean);
      case TaskType::kHeatAndPlace:
        return transform_and_place(&Expert::is_hot);
      case TaskType::kCoolAndPlace:
        return transform_and_place(&Expert::is_cold);
      case TaskType::kExamineInLight:
        return examine();
      case TaskType::kStackAndPlace:
        return stack();
    }
    return std::nullopt;
  }

 private:
  using Condition = bool (*)(const Thing&);
  static bool is_clean(const Thing& t) { return !t.dirty; }
  static bool is_hot(const Thing& t) { return t.temperature == Temperature::kHot; }
  static bool is_cold(const Thing& t) { return t.temperature == Temperature::kCold; }

  const Thing* held() const {
    return w_.agent.holding.empty() ? nullptr : w_.find(w_.agent.holding);
  }

  int room_index(const std::string& room) const {
    for (size_t i = 0; i < w_.rooms.size(); ++i)
      if (w_.rooms[i].name == room) return static_cast<int>(i);
    return static_cast<int>(w_.rooms.size());
  }

  // Nearest first: held, where the agent stands, its room, then house order.
  std::tuple<int, int, int> cost(const Thing& t) const {
    const int index = static_cast<int>(&t - w_.things.data());
    if (t.id == w_.agent.holding) return {0, 0, index};
    const std::string place = w_.place_of(t);
    if (!w_.agent.at.empty() && place == w_.agent.at) return {1, 0, index};
    const std::string room = w_.room_of(t);
    if (room == w_.agent.room) return {2, 0, index};
    return {3, room_index(room), index};
  }

  template <class Pred>
  const Thing* nearest(Pred pred) const {
    const Thing* best = nullptr;
    for (const Thing& t : w_.things)
      if (t.known && pred(t) && (!best || cost(t) < cost(*best))) best = &t;
    return best;
  }

  const Thing* nearest_fixed(const std::string& type) const {
    return nearest([&](const Thing& t) { return t.type == type && t.parent.empty() && !t.locked; });
  }

  const Thing* nearest_appliance(Appliance a) const {
    return nearest([&](const Thing& t) { return w_.info(t).appliance == a; });
  }

  const Thing* key_for(const std::string& lock) const {
    return nearest([&](const Thing& t) { return t.opens == lock; });
  }

  // --- reaching places -------------------------------------------------------------------

  Next reach_room(const std::string& room) {
    if (w_.room_accessible(room)) return std::nullopt;
    const Thing* door = w_.find(w_.find_room(room)->door);
    if (!door->known) return explore();
    return open_fixed(*door);
  }

  Next stand_at(const Thing& fixed) {
    if (Next n = reach_room(w_.room_of(fixed))) return n;
    if (w_.agent.at == fixed.id) return std::nullopt;
    return act(Verb::kFind, fixed.id);
  }

  // Opens a fixed receptacle or door, fetching its key first when it is locked.
  Next open_fixed(const Thing& fixed) {
    if (fixed.open) return std::nullopt;
    if (fixed.locked) {
      const Thing* key = key_for(fixed.id);
      if (!key) return explore();
      if (Next n = hold(*key)) return n;
    }
    if (Next n = stand_at(fixed)) return n;
    return act(Verb::kOpen, fixed.id);
  }

  // Stands where t can be reached, with its enclosing receptacle open.
  Next reach(const Thing& t) {
    const Thing* place = w_.find(w_.place_of(t));
    if (Next n = reach_room(w_.room_of(*place))) return n;
    if (place != &t && w_.info(*place).openable && !place->open) return open_fixed(*place);
    if (w_.agent.at == place->id) return std::nullopt;
    return act(Verb::kFind, place == &t ? t.id : (w_.visible(t) ? t.id : place->id));
  }

  Next hold(const Thing& t) {
    if (w_.agent.holding == t.id) return std::nullopt;
    if (held()) return drop();
    if (Next n = reach(t)) return n;
    return act(Verb::kPickUp, t.id);
  }

  // Puts down what is held: where the agent stands when that takes it, else on the first
  // surface of the room.
  Next drop() {
    const Thing& h = *held();
    const Thing* here = w_.agent.at.empty() ? nullptr : w_.find(w_.agent.at);
    if (here && w_.info(*here).receptacle && (!w_.info(*here).openable || here->open) &&
        receptacle_accepts(w_.info(*here), w_.info(h)))
      return act(Verb::kPut, h.id, here->id);
    for (const Thing& t : w_.things) {
      if (!t.known || !t.parent.empty() || t.room != w_.agent.room) continue;
      if (!w_.info(t).surface || !receptacle_accepts(w_.info(t), w_.info(h))) continue;
      return act(Verb::kFind, t.id);
    }
    return std::nullopt;
  }

  // Puts t (held or not) into the fixed receptacle dest.
  Next place_in(const Thing& t, const Thing& dest) {
    if (Next n = hold(t)) return n;
    if (Next n = stand_at(dest)) return n;
    if (w_.info(dest).openable && !dest.open) return act(Verb::kOpen, dest.id);
    return act(Verb::kPut, t.id, dest.id);
  }

  // --- exploring ---------------------------------------------------------------------------

  bool unexplored(const Thing& t) const {
    return t.known && t.parent.empty() && w_.info(t).receptacle && w_.info(t).openable &&
           !t.contents_seen;
  }

  Next explore() {
    if (++explore_depth_ > 4) return std::nullopt;  // a key behind its own lock: no plan
    for (const Thing& t : w_.things)
      if (unexplored(t) && !t.locked && t.room == w_.agent.room) return open_fixed(t);
    for (const Room& r : w_.rooms) {
      if (r.visited) continue;
      if (w_.room_accessible(r.name)) return act(Verb::kGoTo, r.name);
      const Thing* door = w_.find(r.door);
      if (door->known && !door->locked) return open_fixed(*door);
    }
    for (const Room& r : w_.rooms)
      for (const Thing& t : w_.things)
        if (unexplored(t) && !t.locked && t.room == r.name) return open_fixed(t);
    for (const Room& r : w_.rooms) {
      if (r.visited) continue;
      const Thing* door = w_.find(r.door);
      if (door->known && key_for(door->id)) return open_fixed(*door);
    }
    for (const Thing& t : w_.things)
      if (unexplored(t) && t.locked && key_for(t.id)) return open_fixed(t);
    return std::nullopt;
  }

  // --- tasks -------------------------------------------------------------------------------

  bool in_destination(const Thing& t) const {
    const Thing* p = t.parent.empty() ? nullptr : w_.find(t.parent);
    return p && p->type == task_.receptacle;
  }

  Next transform_and_place(Condition cond) {
    const Thing* h = held();
    const Thing* obj = h && h->type == task_.object ? h : nullptr;
    // Prefer one already in the wanted state (memory says the apple is cold: no trip to the
    // fridge), then the nearest.
    if (!obj && cond)
      obj = nearest(
          [&](const Thing& t) { return t.type == task_.object && !in_destination(t) && cond(t); });
    if (!obj)
      obj = nearest([&](const Thing& t) { return t.type == task_.object && !in_destination(t); });
    if (!obj) return explore();
    if (cond && !cond(*obj)) {
      const Appliance a = cond == &Expert::is_clean ? Appliance::kCleans
                          : cond == &Expert::is_hot ? Appliance::kHeats
                                                    : Appliance::kCools;
      const Thing* station = nearest_appliance(a);
      if (!station) return explore();
      if (Next n = hold(*obj)) return n;
      if (Next n = stand_at(*station)) return n;
      const Verb v = a == Appliance::kCleans  ? Verb::kClean
                     : a == Appliance::kHeats ? Verb::kHeat
                                              : Verb::kCool;
      return act(v, obj->id);
    }
    const Thing* dest = nearest_fixed(task_.receptacle);
    if (!dest) return explore();
    return place_in(*obj, *dest);
  }

  Next examine() {
    const Thing* lamp = nearest([&](const Thing& t) { return t.type == task_.receptacle; });
    const Thing* h = held();
    const Thing* obj = h && h->type == task_.object
                           ? h
                           : nearest([&](const Thing& t) { return t.type == task_.object; });
    if (!obj || !lamp) return explore();
    if (Next n = hold(*obj)) return n;
    if (Next n = stand_at(*lamp)) return n;
    return act(Verb::kTurnOn, lamp->id);
  }

  Next stack() {
    const Thing* dest = nearest_fixed(task_.receptacle);
    auto is_container = [&](const Thing& t) { return t.type == task_.container; };
    // An object already in a container: carry that container.
    const Thing* filled = nearest([&](const Thing& t) {
      const Thing* p = t.parent.empty() ? nullptr : w_.find(t.parent);
      return t.type == task_.object && p && is_container(*p);
    });
    if (filled) {
      if (!dest) return explore();
      return place_in(*w_.find(filled->parent), *dest);
    }
    const Thing* h = held();
    if (h && is_container(*h)) {
      if (!dest) return explore();
      return place_in(*h, *dest);
    }
    const Thing* container =
        nearest([&](const Thing& t) { return is_container(t) && in_destination(t); });
    if (!container) container = nearest(is_container);
    const Thing* obj = h && h->type == task_.object
                           ? h
                           : nearest([&](const Thing& t) { return t.type == task_.object; });
    if (!container || !obj) return explore();
    if (Next n = hold(*obj)) return n;
    if (Next n = reach(*container)) return n;
    return act(Verb::kPut, obj->id, container->id);
  }

  const World& w_;
  const Task& task_;
  int explore_depth_ = 0;
};

}  // namespace

std::optional<Action> expert_next_action(const World& world, const Task& task) {
  return Expert(world, task).run();
}

}  // namespace engram::env
