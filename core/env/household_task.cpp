#include "core/env/household_task.h"

namespace engram::env {
namespace {

bool parent_has_type(const World& w, const Thing& t, const std::string& type) {
  const Thing* p = t.parent.empty() ? nullptr : w.find(t.parent);
  return p && p->type == type;
}

int count_placed(const World& w, const std::string& object, const std::string& receptacle,
                 bool (*extra)(const Thing&)) {
  int n = 0;
  for (const Thing& t : w.things)
    if (t.type == object && parent_has_type(w, t, receptacle) && (!extra || extra(t))) ++n;
  return n;
}

bool is_clean(const Thing& t) {
  return !t.dirty;
}
bool is_hot(const Thing& t) {
  return t.temperature == Temperature::kHot;
}
bool is_cold(const Thing& t) {
  return t.temperature == Temperature::kCold;
}

const Thing* held(const World& w) {
  return w.agent.holding.empty() ? nullptr : w.find(w.agent.holding);
}

bool stacked(const World& w, const Task& task, bool with_destination) {
  for (const Thing& t : w.things) {
    if (t.type != task.object || !parent_has_type(w, t, task.container)) continue;
    if (!with_destination || parent_has_type(w, *w.find(t.parent), task.receptacle)) return true;
  }
  return false;
}

bool lamp_lit(const World& w, const std::string& lamp_type, bool must_stand_there) {
  for (const Thing& t : w.things)
    if (t.type == lamp_type && t.on && (!must_stand_there || w.agent.at == t.id)) return true;
  return false;
}

}  // namespace

namespace {

std::string a_or_an(const std::string& noun) {
  return (std::string("aeiou").find(noun[0]) != std::string::npos ? "an " : "a ") + noun;
}

}  // namespace

const char* task_type_name(TaskType type) {
  switch (type) {
    case TaskType::kPickAndPlace:
      return "pick_and_place";
    case TaskType::kPickTwoAndPlace:
      return "pick_two_and_place";
    case TaskType::kCleanAndPlace:
      return "clean_and_place";
    case TaskType::kHeatAndPlace:
      return "heat_and_place";
    case TaskType::kCoolAndPlace:
      return "cool_and_place";
    case TaskType::kExamineInLight:
      return "examine_in_light";
    case TaskType::kStackAndPlace:
      return "stack_and_place";
  }
  return "?";
}

std::string Task::instruction() const {
  const std::string x = display_name(object);
  const std::string y = display_name(receptacle);
  const std::string prep = preposition_for(receptacle);
  switch (type) {
    case TaskType::kPickAndPlace:
      return "put " + a_or_an(x) + " " + prep + " " + a_or_an(y) + ".";
    case TaskType::kPickTwoAndPlace:
      return "put two " + plural_of(object) + " " + prep + " " + a_or_an(y) + ".";
    case TaskType::kCleanAndPlace:
      return "clean " + a_or_an(x) + " and put it " + prep + " " + a_or_an(y) + ".";
    case TaskType::kHeatAndPlace:
      return "heat " + a_or_an(x) + " and put it " + prep + " " + a_or_an(y) + ".";
    case TaskType::kCoolAndPlace:
      return "cool " + a_or_an(x) + " and put it " + prep + " " + a_or_an(y) + ".";
    case TaskType::kExamineInLight:
      return "examine " + a_or_an(x) + " under the " + y + ".";
    case TaskType::kStackAndPlace: {
      const std::string z = display_name(container);
      return "put " + a_or_an(x) + " " + preposition_for(container) + " " + a_or_an(z) +
             " and put the " + z + " " + prep + " " + a_or_an(y) + ".";
    }
  }
  return "";
}

bool task_satisfied(const World& w, const Task& task) {
  return subgoals_holding(w, task).back();
}

std::vector<std::string> subgoal_names(const Task& t) {
  const std::string x = display_name(t.object);
  switch (t.type) {
    case TaskType::kPickAndPlace:
      return {"hold a " + x, "place it"};
    case TaskType::kPickTwoAndPlace:
      return {"place one " + x, "place two"};
    case TaskType::kCleanAndPlace:
      return {"hold a clean " + x, "place it"};
    case TaskType::kHeatAndPlace:
      return {"hold a hot " + x, "place it"};
    case TaskType::kCoolAndPlace:
      return {"hold a cold " + x, "place it"};
    case TaskType::kExamineInLight:
      return {"hold a " + x, "light the " + display_name(t.receptacle), "examine it"};
    case TaskType::kStackAndPlace:
      return {x + " in a " + display_name(t.container), "place the " + display_name(t.container)};
  }
  return {};
}

std::vector<bool> subgoals_holding(const World& w, const Task& t) {
  const Thing* h = held(w);
  const bool holding_x = h && h->type == t.object;
  switch (t.type) {
    case TaskType::kPickAndPlace:
      return {holding_x, count_placed(w, t.object, t.receptacle, nullptr) >= 1};
    case TaskType::kPickTwoAndPlace: {
      const int n = count_placed(w, t.object, t.receptacle, nullptr);
      return {n >= 1, n >= 2};
    }
    case TaskType::kCleanAndPlace:
      return {holding_x && !h->dirty, count_placed(w, t.object, t.receptacle, is_clean) >= 1};
    case TaskType::kHeatAndPlace:
      return {holding_x && is_hot(*h), count_placed(w, t.object, t.receptacle, is_hot) >= 1};
    case TaskType::kCoolAndPlace:
      return {holding_x && is_cold(*h), count_placed(w, t.object, t.receptacle, is_cold) >= 1};
    case TaskType::kExamineInLight:
      return {holding_x, lamp_lit(w, t.receptacle, false),
              holding_x && lamp_lit(w, t.receptacle, true)};
    case TaskType::kStackAndPlace:
      return {stacked(w, t, false), stacked(w, t, true)};
  }
  return {false};
}

}  // namespace engram::env
