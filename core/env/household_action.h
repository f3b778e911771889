// Skill-level household actions, at the granularity of ALFRED's high-level planners (find,
// pick up, put, open, close, slice, toggle, heat, cool, clean), plus `go to ROOM`. The text form
// is what a model reads and writes, so it round-trips: to_string(*parse_action(s)) is the
// canonical spelling of s.
//
// Text forms (ids like apple_1, or type names, which the world resolves):
//   go to ROOM | find X | pick up X | put X in Y | put X on Y | open X | close X | slice X |
//   turn on X | turn off X | heat X | cool X | clean X
// Parsing lower-cases, drops the articles a/an/the and joins multi-word names with '_'
// ("put the apple in the sink basin" -> put apple in sink_basin). `put` accepts either
// preposition; to_string writes the one the receptacle's type calls for.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace engram::env {

enum class Verb {
  kGoTo,
  kFind,
  kPickUp,
  kPut,
  kOpen,
  kClose,
  kSlice,
  kTurnOn,
  kTurnOff,
  kHeat,
  kCool,
  kClean
};

struct Action {
  Verb verb = Verb::kFind;
  std::string target;       // the room for kGoTo, else the object acted on
  std::string destination;  // the receptacle for kPut, else empty

  bool operator==(const Action&) const = default;
};

// nullopt with *error set when the text is not an action ("unknown verb 'jump'").
std::optional<Action> parse_action(std::string_view text, std::string* error = nullptr);
std::string to_string(const Action& action);
const char* verb_name(Verb verb);

}  // namespace engram::env
