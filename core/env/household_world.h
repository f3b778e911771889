// The household world: rooms, things and the agent, and the rules that change them. Every
// change comes from an action; an invalid action fails with a reason and changes nothing.
//
// Rules (simplifications of ALFRED stated once):
// - The agent is in a room and "at" one fixed thing (a receptacle, lamp or door) or at none
//   right after `go to ROOM`. `find X` walks to X (through an open door) and stands at X, or at
//   the fixed receptacle that holds X.
// - It holds at most one thing. A portable container (bowl, mug, box) carries its contents.
// - Pick up, put, open, close, turn on/off act on what is where the agent stands; closed
//   receptacles hide and block their contents.
// - A locked safe or door opens only while the agent holds its key; it then stays unlocked.
// - slice X: the agent holds a knife (or butter knife) and X lies where it stands; X becomes
//   "sliced" (one object, not pieces). heat / cool / clean X: the agent holds X and stands at a
//   microwave / fridge / sink basin. Nothing cools or dirties by itself.
// - Perception: the agent knows the room names from the start; entering a room reveals its
//   fixed things and everything visible there; opening a receptacle reveals its contents. Only
//   the agent changes the world, so what it has seen stays true; the unseen is unknown.
// - Names in actions are ids (apple_1) or type names (apple, resolved among known things:
//   held, then where the agent stands, then its room, then id order). An unseen thing cannot be
//   named.
#pragma once

#include <string>
#include <vector>

#include "core/env/household_action.h"
#include "core/env/household_catalog.h"

namespace engram::env {

enum class Temperature { kRoomTemp, kHot, kCold };
const char* temperature_name(Temperature t);

struct Thing {
  std::string id;  // "<type>_<n>", unique
  std::string type;
  std::string room;    // fixed things only; a portable thing's room follows its parent
  std::string parent;  // receptacle holding a portable thing; empty when held or fixed
  bool open = false;
  bool locked = false;
  std::string opens;     // keys: the id of the safe or door they unlock
  std::string leads_to;  // doors: the room behind
  bool on = false;
  bool dirty = false;
  bool sliced = false;
  Temperature temperature = Temperature::kRoomTemp;
  // What the agent has perceived (the world keeps it because only the world knows what was
  // visible when).
  bool known = false;
  bool contents_seen = false;
};

struct Room {
  std::string name;
  std::string door;  // id of the door that must be open to enter; empty when none
  bool visited = false;
};

struct AgentState {
  std::string room;
  std::string at;       // a fixed thing's id, or empty
  std::string holding;  // a portable thing's id, or empty
};

struct ActionResult {
  bool ok = false;
  std::string message;  // what the agent observes, or why the action failed
};

class World {
 public:
  std::vector<Room> rooms;
  std::vector<Thing> things;  // in creation order; the order every listing uses
  AgentState agent;

  Thing* find(const std::string& id);
  const Thing* find(const std::string& id) const;
  const Room* find_room(const std::string& name) const;
  const TypeInfo& info(const Thing& t) const { return type_info(t.type); }

  // The room a thing is in (through its parents); the agent's room while held.
  std::string room_of(const Thing& t) const;
  // The fixed thing where the agent must stand to reach t; empty while t is held.
  std::string place_of(const Thing& t) const;
  // Not held and every enclosing receptacle open.
  bool visible(const Thing& t) const;
  bool room_accessible(const std::string& room) const;
  std::vector<const Thing*> contents(const std::string& receptacle_id) const;

  // Marks the start room seen; call once after building the world.
  void begin();
  ActionResult apply(const Action& action);

 private:
  // An id or a type name among known things; error set otherwise.
  Thing* resolve(const std::string& name, std::string* error);
  Thing* resolve_destination(const std::string& name, std::string* error);
  void enter_room(const std::string& room);
  void reveal_contents(Thing& receptacle);
  ActionResult walk_to(Thing& target);
};

}  // namespace engram::env
