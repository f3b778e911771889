#include "core/env/embodied_memory.h"

#include "core/env/household_task.h"

namespace engram::env {

namespace {

int kind_rank(const std::string& kind) {
  for (int i = 0; const char* k : {"example", "layout", "history", "agent", "object"}) {
    if (kind == k) return i;
    ++i;
  }
  return 5;
}

}  // namespace

void EmbodiedMemory::update(const std::vector<MemoryRecord>& records, int64_t step) {
  for (const MemoryRecord& r : records) {
    MemorySegment* s = nullptr;
    for (MemorySegment& existing : segments_)
      if (existing.key == r.key) s = &existing;
    if (!s) {
      // New segments join the end of their kind's group, so the static kinds stay a prefix.
      auto after = segments_.end();
      while (after != segments_.begin() && kind_rank((after - 1)->kind) > kind_rank(r.kind))
        --after;
      segments_.insert(after, {r.key, r.kind, r.text, 1, step});
      continue;
    }
    if (s->text == r.text) continue;
    s->text = r.text;
    ++s->version;
    s->last_changed_step = step;
  }
}

const MemorySegment* EmbodiedMemory::find(const std::string& key) const {
  for (const MemorySegment& s : segments_)
    if (s.key == key) return &s;
  return nullptr;
}

std::string describe_thing(const World& w, const Thing& t) {
  const TypeInfo& ti = w.info(t);
  std::string s = t.id + ": ";
  if (!ti.portable) {
    s += t.room;
    if (ti.category == Category::kDoor) s += " | to " + t.leads_to;
    if (ti.openable) s += t.locked ? " | locked" : (t.open ? " | open" : " | closed");
    if (ti.openable && ti.receptacle && !t.contents_seen) s += " | unsearched";
    if (ti.toggleable) s += t.on ? " | on" : " | off";
    return s;
  }
  if (t.id == w.agent.holding) {
    s += "held";
  } else {
    s += std::string(preposition_for(w.find(t.parent)->type)) + " " + t.parent;
  }
  if (ti.heatable || ti.coolable) s += std::string(" | ") + temperature_name(t.temperature);
  if (ti.cleanable) s += t.dirty ? " | dirty" : " | clean";
  if (t.sliced) s += " | sliced";
  if (!t.opens.empty()) s += " | opens " + t.opens;
  return s;
}

const std::vector<MemoryRecord>& example_records() {
  // Written in the expert's own style over a house that is not any seed's, so they show the
  // format without leaking a world.
  static const std::vector<MemoryRecord> examples = [] {
    const std::vector<std::pair<TaskType, std::string>> plans = {
        {TaskType::kPickAndPlace,
         "put a pen on a desk. => find pen_2; pick up pen_2; find desk_1; put pen_2 on desk_1"},
        {TaskType::kPickTwoAndPlace,
         "put two apples in a fridge. => find apple_1; pick up apple_1; find fridge_1; open "
         "fridge_1; put apple_1 in fridge_1; find apple_3; pick up apple_3; find fridge_1; put "
         "apple_3 in fridge_1"},
        {TaskType::kCleanAndPlace,
         "clean a mug and put it in a cabinet. => find mug_1; pick up mug_1; find sink_basin_1; "
         "clean mug_1; find cabinet_2; open cabinet_2; put mug_1 in cabinet_2"},
        {TaskType::kHeatAndPlace,
         "heat a potato and put it on a countertop. => find potato_1; pick up potato_1; find "
         "microwave_1; heat potato_1; find countertop_1; put potato_1 on countertop_1"},
        {TaskType::kCoolAndPlace,
         "cool a tomato and put it on a dining table. => find tomato_2; pick up tomato_2; find "
         "fridge_1; cool tomato_2; find dining_table_1; put tomato_2 on dining_table_1"},
        {TaskType::kExamineInLight,
         "examine a book under the desk lamp. => find book_1; pick up book_1; find desk_lamp_1; "
         "turn on desk_lamp_1"},
        {TaskType::kStackAndPlace,
         "put a pencil in a mug and put the mug on a shelf. => find pencil_1; pick up pencil_1; "
         "find mug_2; put pencil_1 in mug_2; pick up mug_2; find shelf_1; put mug_2 on shelf_1"},
    };
    std::vector<MemoryRecord> out;
    for (const auto& [type, plan] : plans) {
      const std::string name = task_type_name(type);
      out.push_back({"example_" + name, "example", "example " + name + ": " + plan});
    }
    out.push_back({"example_locked", "example",
                   "example locked: put a watch on a bed. => find drawer_3; open drawer_3; pick up "
                   "key_2; find safe_1; open safe_1; put key_2 on bed_1; find safe_1; pick up "
                   "watch_1; find bed_1; put watch_1 on bed_1"});
    return out;
  }();
  return examples;
}

std::vector<MemoryRecord> memory_records(const World& w,
                                         const std::vector<std::string>& finished_tasks) {
  std::vector<MemoryRecord> out = example_records();
  std::string rooms = "rooms:";
  for (size_t i = 0; i < w.rooms.size(); ++i)
    rooms += (i ? ", " : " ") + w.rooms[i].name + (w.rooms[i].visited ? " visited" : " unvisited");
  out.push_back({"rooms", "layout", rooms});
  for (size_t i = 0; i < finished_tasks.size(); ++i)
    out.push_back({"task_" + std::to_string(i + 1), "history", finished_tasks[i]});
  out.push_back({"agent", "agent",
                 "agent: in " + w.agent.room + " | at " +
                     (w.agent.at.empty() ? "nothing" : w.agent.at) + " | holding " +
                     (w.agent.holding.empty() ? "nothing" : w.agent.holding)});
  for (const Thing& t : w.things)
    if (t.known) out.push_back({t.id, "object", describe_thing(w, t)});
  return out;
}

}  // namespace engram::env
