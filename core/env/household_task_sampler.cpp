#include "core/env/household_task_sampler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/env/expert_planner.h"
#include "core/env/seeded_rng.h"

namespace engram::env {
namespace {

std::vector<std::string> sorted(const std::set<std::string>& s) {
  return {s.begin(), s.end()};
}

// Fixed receptacle types present (a safe is never a destination) that take `item`.
std::vector<std::string> destinations(const World& w, const TypeInfo& item,
                                      const std::string& skip) {
  std::set<std::string> out;
  for (const Thing& t : w.things) {
    const TypeInfo& ti = w.info(t);
    if (!t.parent.empty() || !ti.receptacle || ti.portable || t.type == "safe" || t.type == skip)
      continue;
    if (receptacle_accepts(ti, item)) out.insert(t.type);
  }
  return sorted(out);
}

std::optional<Task> draw(const World& w, SeededRng& rng, bool prefer_locked) {
  Task task;
  task.type = static_cast<TaskType>(rng.below(kTaskTypeCount));
  std::map<std::string, int> count;
  std::map<std::string, bool> all_locked;
  for (const Thing& t : w.things) {
    if (!w.info(t).portable || t.type == "key") continue;
    ++count[t.type];
    auto [it, fresh] = all_locked.emplace(t.type, true);
    it->second = it->second && behind_lock(w, t);
  }
  std::vector<std::string> objects;
  for (const auto& [type, n] : count) {
    const TypeInfo& ti = type_info(type);
    bool ok = true;
    switch (task.type) {
      case TaskType::kPickTwoAndPlace:
        ok = n >= 2;
        break;
      case TaskType::kCleanAndPlace:
        ok = ti.cleanable;
        break;
      case TaskType::kHeatAndPlace:
        ok = ti.heatable;
        break;
      case TaskType::kCoolAndPlace:
        ok = ti.coolable;
        break;
      case TaskType::kExamineInLight:
        ok = ti.category != Category::kFood && ti.category != Category::kDish;
        break;
      case TaskType::kStackAndPlace:
        ok = !ti.receptacle;
        break;
      default:
        break;
    }
    if (ok) objects.push_back(type);
  }
  if (prefer_locked) {
    std::vector<std::string> locked;
    for (const std::string& o : objects)
      if (all_locked[o]) locked.push_back(o);
    if (!locked.empty()) objects = locked;
  }
  if (objects.empty()) return std::nullopt;
  task.object = rng.pick(objects);
  task.needs_key = all_locked[task.object];
  const TypeInfo& item = type_info(task.object);
  std::vector<std::string> dests;
  switch (task.type) {
    case TaskType::kExamineInLight: {
      std::set<std::string> lamps;
      for (const Thing& t : w.things)
        if (w.info(t).toggleable) lamps.insert(t.type);
      dests = sorted(lamps);
      break;
    }
    case TaskType::kStackAndPlace: {
      std::set<std::string> containers;
      for (const auto& [type, n] : count)
        if (receptacle_accepts(type_info(type), item)) containers.insert(type);
      if (containers.empty()) return std::nullopt;
      task.container = rng.pick(sorted(containers));
      dests = destinations(w, type_info(task.container), "");
      break;
    }
    case TaskType::kCleanAndPlace:
      dests = destinations(w, item, "sink_basin");
      break;
    case TaskType::kHeatAndPlace:
      dests = destinations(w, item, "microwave");
      break;
    case TaskType::kCoolAndPlace:
      dests = destinations(w, item, "fridge");
      break;
    default:
      dests = destinations(w, item, "");
      break;
  }
  if (dests.empty()) return std::nullopt;
  task.receptacle = rng.pick(dests);
  return task;
}

}  // namespace

bool behind_lock(const World& w, const Thing& thing) {
  const Thing* t = &thing;
  while (t) {
    if (t->locked) return true;
    if (t->parent.empty()) {
      const Room* r = w.find_room(t->room);
      const Thing* door = r && !r->door.empty() ? w.find(r->door) : nullptr;
      return door && door->locked;
    }
    t = w.find(t->parent);
  }
  return false;
}

std::vector<Task> sample_session_tasks(const World& start, uint64_t seed,
                                       const TaskSamplerOptions& options) {
  SeededRng rng(seed ^ 0x5461736B73ull);  // "Tasks"
  World w = start;
  std::vector<Task> tasks;
  for (int i = 0; i < options.count; ++i) {
    const bool prefer_locked = rng.chance(options.prefer_locked);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const std::optional<Task> task = draw(w, rng, prefer_locked && attempt < 100);
      if (!task || task_satisfied(w, *task)) continue;
      World trial = w;
      for (int step = 0; step < options.max_steps_per_task && !task_satisfied(trial, *task);
           ++step) {
        const std::optional<Action> a = expert_next_action(trial, *task);
        if (!a || !trial.apply(*a).ok) break;
      }
      if (!task_satisfied(trial, *task)) continue;
      tasks.push_back(*task);
      w = std::move(trial);
      break;
    }
  }
  return tasks;
}

}  // namespace engram::env
