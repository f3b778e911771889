// What each kind of household thing can do: the rules the world checks, as data. One table
// instead of per-type branches, so a new type is one line (as ALFRED's object metadata).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace engram::env {

// What a receptacle may hold is decided by category (a safe holds small things and keys, a fridge
// food and dishes).
enum class Category {
  kReceptacle,
  kLamp,
  kDoor,
  kFood,
  kDish,
  kUtensil,
  kSmall,
  kBath,
  kLarge,
  kKey
};

enum class Appliance { kNone, kHeats, kCools, kCleans };

struct TypeInfo {
  std::string name;
  Category category = Category::kSmall;
  bool portable = false;
  bool receptacle = false;  // fixed receptacles, and portable containers (bowl, mug, box)
  bool surface = false;     // things go "on" it rather than "in"
  bool openable = false;
  bool toggleable = false;
  bool sliceable = false;
  bool heatable = false;
  bool coolable = false;
  bool cleanable = false;
  bool slicer = false;  // holding one lets the agent slice
  Appliance appliance = Appliance::kNone;
  std::vector<Category> accepts;  // for receptacles; empty means every portable category
};

// nullptr for an unknown type name.
const TypeInfo* find_type(std::string_view name);
// Throws std::out_of_range naming the type.
const TypeInfo& type_info(std::string_view name);
// "sink_basin_2" -> "sink_basin"; a name without a numeric suffix is returned unchanged.
std::string type_of_id(std::string_view id);
// "on" for surfaces and plates, "in" otherwise (also for unknown types).
const char* preposition_for(std::string_view type);
bool receptacle_accepts(const TypeInfo& receptacle, const TypeInfo& item);
// "coffee_table" -> "coffee table"; plural_of("knife") -> "knives".
std::string display_name(std::string_view type);
std::string plural_of(std::string_view type);

}  // namespace engram::env
