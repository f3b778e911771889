#include "core/env/household_world.h"

namespace engram::env {
namespace {

ActionResult fail(std::string why) {
  return {false, std::move(why)};
}

ActionResult done(std::string what) {
  return {true, std::move(what)};
}

}  // namespace

const char* temperature_name(Temperature t) {
  switch (t) {
    case Temperature::kRoomTemp:
      return "room temp";
    case Temperature::kHot:
      return "hot";
    case Temperature::kCold:
      return "cold";
  }
  return "?";
}

Thing* World::find(const std::string& id) {
  for (Thing& t : things)
    if (t.id == id) return &t;
  return nullptr;
}

const Thing* World::find(const std::string& id) const {
  for (const Thing& t : things)
    if (t.id == id) return &t;
  return nullptr;
}

const Room* World::find_room(const std::string& name) const {
  for (const Room& r : rooms)
    if (r.name == name) return &r;
  return nullptr;
}

std::string World::room_of(const Thing& t) const {
  if (t.id == agent.holding) return agent.room;
  if (t.parent.empty()) return t.room;
  const Thing* p = find(t.parent);
  return p ? room_of(*p) : t.room;
}

std::string World::place_of(const Thing& t) const {
  if (t.id == agent.holding) return "";
  if (t.parent.empty()) return t.id;
  const Thing* p = find(t.parent);
  return p ? place_of(*p) : "";
}

bool World::visible(const Thing& t) const {
  if (t.id == agent.holding) return false;
  const Thing* p = t.parent.empty() ? nullptr : find(t.parent);
  while (p) {
    if (info(*p).openable && !p->open) return false;
    if (p->id == agent.holding) return false;
    p = p->parent.empty() ? nullptr : find(p->parent);
  }
  return true;
}

bool World::room_accessible(const std::string& room) const {
  const Room* r = find_room(room);
  if (!r) return false;
  if (r->door.empty()) return true;
  const Thing* d = find(r->door);
  return d && d->open;
}

std::vector<const Thing*> World::contents(const std::string& receptacle_id) const {
  std::vector<const Thing*> out;
  for (const Thing& t : things)
    if (t.parent == receptacle_id && t.id != agent.holding) out.push_back(&t);
  return out;
}

void World::reveal_contents(Thing& receptacle) {
  receptacle.contents_seen = true;
  for (Thing& t : things) {
    if (t.parent != receptacle.id) continue;
    t.known = true;
    // Portable containers are open: what is in a bowl is seen with the bowl.
    if (info(t).receptacle) reveal_contents(t);
  }
}

void World::enter_room(const std::string& room) {
  agent.room = room;
  for (Room& r : rooms)
    if (r.name == room) r.visited = true;
  for (Thing& t : things) {
    if (!t.parent.empty() || t.room != room) continue;
    t.known = true;
    if (info(t).receptacle && (!info(t).openable || t.open)) reveal_contents(t);
  }
  // The door into a room is seen from both sides.
  for (Thing& t : things)
    if (info(t).category == Category::kDoor && t.leads_to == room) t.known = true;
}

void World::begin() {
  enter_room(agent.room);
}

Thing* World::resolve(const std::string& name, std::string* error) {
  if (Thing* t = find(name)) {
    if (!t->known) {
      *error = "you have not seen " + name;
      return nullptr;
    }
    return t;
  }
  if (!find_type(name)) {
    *error = "there is no " + name;
    return nullptr;
  }
  Thing* best = nullptr;
  int best_rank = 4;
  for (Thing& t : things) {
    if (t.type != name || !t.known) continue;
    int rank = 3;
    if (t.id == agent.holding)
      rank = 0;
    else if (!agent.at.empty() && place_of(t) == agent.at)
      rank = 1;
    else if (room_of(t) == agent.room)
      rank = 2;
    if (rank < best_rank) {
      best = &t;
      best_rank = rank;
    }
  }
  if (!best) *error = "you have not seen any " + display_name(name);
  return best;
}

Thing* World::resolve_destination(const std::string& name, std::string* error) {
  // A type name as a destination means the one where the agent stands when there is one.
  if (!find(name) && find_type(name) && !agent.at.empty()) {
    Thing* here = find(agent.at);
    if (here && here->type == name) return here;
  }
  return resolve(name, error);
}

ActionResult World::walk_to(Thing& target) {
  const std::string room = room_of(target);
  if (room != agent.room) {
    if (!room_accessible(room)) {
      const Room* r = find_room(room);
      return fail("the " + room + " is behind " + r->door + ", which is closed");
    }
    enter_room(room);
  }
  agent.at = place_of(target);
  if (agent.at == target.id) return done("you are at " + target.id + " in the " + room);
  return done("you are at " + agent.at + ", where " + target.id + " is");
}

ActionResult World::apply(const Action& a) {
  std::string error;
  if (a.verb == Verb::kGoTo) {
    const Room* r = find_room(a.target);
    if (!r) return fail("there is no room called " + a.target);
    if (r->name == agent.room) return fail("you are already in the " + r->name);
    if (!room_accessible(r->name))
      return fail("the " + r->name + " is behind " + r->door + ", which is closed");
    enter_room(r->name);
    agent.at.clear();
    return done("you are in the " + r->name);
  }

  Thing* t = resolve(a.target, &error);
  if (!t) return fail(error);
  const TypeInfo& ti = info(*t);
  const bool here = !agent.at.empty() && place_of(*t) == agent.at;

  switch (a.verb) {
    case Verb::kGoTo:
      break;
    case Verb::kFind: {
      if (t->id == agent.holding) return fail("you are holding " + t->id);
      if (!visible(*t)) return fail(t->id + " is out of sight (in " + t->parent + ")");
      return walk_to(*t);
    }
    case Verb::kPickUp: {
      if (!ti.portable) return fail(t->id + " cannot be picked up");
      if (t->id == agent.holding) return fail("you are already holding " + t->id);
      if (!agent.holding.empty())
        return fail("your hands are full (holding " + agent.holding + ")");
      if (!here) return fail(t->id + " is not where you are; find it first");
      if (!visible(*t)) return fail(t->parent + " is closed");
      const std::string from = t->parent;
      t->parent.clear();
      agent.holding = t->id;
      return done("you pick up " + t->id + " from " + from);
    }
    case Verb::kPut: {
      if (t->id != agent.holding) return fail("you are not holding " + t->id);
      Thing* dest = resolve_destination(a.destination, &error);
      if (!dest) return fail(error);
      const TypeInfo& di = info(*dest);
      if (dest == t) return fail("cannot put " + t->id + " in itself");
      if (!di.receptacle) return fail(dest->id + " is not a receptacle");
      const bool at_dest = di.portable
                               ? place_of(*dest) == agent.at && !agent.at.empty() && visible(*dest)
                               : agent.at == dest->id;
      if (!at_dest) return fail("you are not at " + dest->id + "; find it first");
      if (di.openable && !dest->open) return fail(dest->id + " is closed");
      if (!receptacle_accepts(di, ti))
        return fail(display_name(t->type) + " does not fit " + preposition_for(dest->type) + " " +
                    display_name(dest->type));
      t->parent = dest->id;
      agent.holding.clear();
      return done(std::string("you put ") + t->id + " " + preposition_for(dest->type) + " " +
                  dest->id);
    }
    case Verb::kOpen:
    case Verb::kClose: {
      const bool opening = a.verb == Verb::kOpen;
      if (!ti.openable) return fail(t->id + " cannot be " + (opening ? "opened" : "closed"));
      if (agent.at != t->id) return fail("you are not at " + t->id + "; find it first");
      if (t->open == opening) return fail(t->id + " is already " + (opening ? "open" : "closed"));
      if (!opening) {
        t->open = false;
        return done("you close " + t->id);
      }
      std::string how = "you open " + t->id;
      if (t->locked) {
        const Thing* held = agent.holding.empty() ? nullptr : find(agent.holding);
        if (!held || held->opens != t->id) return fail(t->id + " is locked; it needs its key");
        t->locked = false;
        how = "you unlock " + t->id + " with " + held->id + " and open it";
      }
      t->open = true;
      if (ti.category == Category::kDoor) return done(how + "; it leads to the " + t->leads_to);
      reveal_contents(*t);
      std::string inside;
      for (const Thing* c : contents(t->id))
        inside += (inside.empty() ? "" : ", ") + c->id;
      return done(how + (inside.empty() ? "; it is empty" : "; inside: " + inside));
    }
    case Verb::kSlice: {
      if (!ti.sliceable) return fail(t->id + " cannot be sliced");
      if (t->sliced) return fail(t->id + " is already sliced");
      const Thing* held = agent.holding.empty() ? nullptr : find(agent.holding);
      if (!held || !info(*held).slicer) return fail("you need to hold a knife to slice");
      if (!here || !visible(*t)) return fail(t->id + " is not in reach; put it down where you are");
      t->sliced = true;
      return done("you slice " + t->id);
    }
    case Verb::kTurnOn:
    case Verb::kTurnOff: {
      const bool turning_on = a.verb == Verb::kTurnOn;
      if (!ti.toggleable) return fail(t->id + " cannot be turned " + (turning_on ? "on" : "off"));
      if (agent.at != t->id) return fail("you are not at " + t->id + "; find it first");
      if (t->on == turning_on) return fail(t->id + " is already " + (turning_on ? "on" : "off"));
      t->on = turning_on;
      return done("you turn " + std::string(turning_on ? "on " : "off ") + t->id);
    }
    case Verb::kHeat:
    case Verb::kCool:
    case Verb::kClean: {
      const Appliance need = a.verb == Verb::kHeat   ? Appliance::kHeats
                             : a.verb == Verb::kCool ? Appliance::kCools
                                                     : Appliance::kCleans;
      const char* where = need == Appliance::kHeats   ? "microwave"
                          : need == Appliance::kCools ? "fridge"
                                                      : "sink basin";
      const bool able = need == Appliance::kHeats   ? ti.heatable
                        : need == Appliance::kCools ? ti.coolable
                                                    : ti.cleanable;
      if (!able) return fail(t->id + " cannot be " + verb_name(a.verb) + "ed");
      if (t->id != agent.holding) return fail("you must hold " + t->id + " first");
      const Thing* at = agent.at.empty() ? nullptr : find(agent.at);
      if (!at || info(*at).appliance != need) return fail(std::string("you must be at a ") + where);
      if (need == Appliance::kCleans) {
        if (!t->dirty) return fail(t->id + " is already clean");
        t->dirty = false;
        return done("you clean " + t->id + " in " + at->id);
      }
      const Temperature target = need == Appliance::kHeats ? Temperature::kHot : Temperature::kCold;
      if (t->temperature == target) return fail(t->id + " is already " + temperature_name(target));
      t->temperature = target;
      return done(std::string("you ") + verb_name(a.verb) + " " + t->id + " in " + at->id);
    }
  }
  return fail("unsupported action");
}

}  // namespace engram::env
