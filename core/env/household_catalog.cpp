#include "core/env/household_catalog.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace engram::env {
namespace {

using C = Category;

TypeInfo fixed(std::string name, bool surface, bool openable, std::vector<Category> accepts = {},
               Appliance appliance = Appliance::kNone) {
  TypeInfo t;
  t.name = std::move(name);
  t.category = C::kReceptacle;
  t.receptacle = true;
  t.surface = surface;
  t.openable = openable;
  t.accepts = std::move(accepts);
  t.appliance = appliance;
  return t;
}

TypeInfo item(std::string name, Category category) {
  TypeInfo t;
  t.name = std::move(name);
  t.category = category;
  t.portable = true;
  return t;
}

std::vector<TypeInfo> build_catalog() {
  std::vector<TypeInfo> all;
  const std::vector<C> food_dish = {C::kFood, C::kDish};
  const std::vector<C> small_things = {C::kSmall, C::kUtensil, C::kKey, C::kBath};
  all.push_back(fixed("fridge", false, true, food_dish, Appliance::kCools));
  all.push_back(fixed("microwave", false, true, food_dish, Appliance::kHeats));
  all.push_back(fixed("sink_basin", false, false,
                      {C::kFood, C::kDish, C::kUtensil, C::kSmall, C::kBath}, Appliance::kCleans));
  all.push_back(fixed("drawer", false, true, small_things));
  all.push_back(fixed("cabinet", false, true));
  all.push_back(fixed("safe", false, true, {C::kSmall, C::kKey}));
  for (const char* s : {"countertop", "dining_table", "coffee_table", "side_table", "tv_stand",
                        "sofa", "bed", "dresser", "desk", "shelf"})
    all.push_back(fixed(s, true, false));

  for (const char* s : {"desk_lamp", "floor_lamp"}) {
    TypeInfo t;
    t.name = s;
    t.category = C::kLamp;
    t.toggleable = true;
    all.push_back(t);
  }
  TypeInfo door;
  door.name = "door";
  door.category = C::kDoor;
  door.openable = true;
  all.push_back(door);

  for (const char* s : {"apple", "tomato", "potato", "bread", "lettuce", "egg"}) {
    TypeInfo t = item(s, C::kFood);
    t.heatable = t.coolable = true;
    t.sliceable = t.name != "egg";
    all.push_back(t);
  }
  struct Dish {
    const char* name;
    std::vector<C> holds;
    bool drink;
  };
  for (const Dish& d :
       std::vector<Dish>{{"mug", {C::kUtensil, C::kSmall}, true},
                         {"cup", {C::kUtensil, C::kSmall}, true},
                         {"bowl", {C::kFood, C::kUtensil, C::kSmall, C::kKey}, false},
                         {"plate", {C::kFood, C::kUtensil}, false},
                         {"pot", {C::kFood, C::kUtensil}, false},
                         {"pan", {C::kFood, C::kUtensil}, false}}) {
    TypeInfo t = item(d.name, C::kDish);
    t.receptacle = true;
    t.surface = t.name == "plate";
    t.cleanable = true;
    t.heatable = t.coolable = d.drink;
    t.accepts = d.holds;
    all.push_back(t);
  }
  for (const char* s : {"knife", "butter_knife", "spoon", "fork", "spatula"}) {
    TypeInfo t = item(s, C::kUtensil);
    t.cleanable = true;
    t.slicer = t.name == "knife" || t.name == "butter_knife";
    all.push_back(t);
  }
  for (const char* s : {"pen", "pencil", "cell_phone", "credit_card", "watch", "keychain",
                        "remote_control", "cd", "alarm_clock", "candle"})
    all.push_back(item(s, C::kSmall));
  for (const char* s : {"soap_bar", "cloth", "spray_bottle", "tissue_box", "sponge"}) {
    TypeInfo t = item(s, C::kBath);
    t.cleanable = t.name == "cloth" || t.name == "sponge";
    all.push_back(t);
  }
  for (const char* s : {"book", "pillow", "vase", "laptop", "statue"})
    all.push_back(item(s, C::kLarge));
  TypeInfo box = item("box", C::kLarge);
  box.receptacle = true;
  box.accepts = {C::kSmall, C::kKey};
  all.push_back(box);
  all.push_back(item("key", C::kKey));
  return all;
}

const std::vector<TypeInfo>& catalog() {
  static const std::vector<TypeInfo> all = build_catalog();
  return all;
}

}  // namespace

const TypeInfo* find_type(std::string_view name) {
  for (const TypeInfo& t : catalog())
    if (t.name == name) return &t;
  return nullptr;
}

const TypeInfo& type_info(std::string_view name) {
  if (const TypeInfo* t = find_type(name)) return *t;
  throw std::out_of_range("unknown household type '" + std::string(name) + "'");
}

std::string type_of_id(std::string_view id) {
  const size_t us = id.rfind('_');
  if (us == std::string_view::npos || us + 1 == id.size()) return std::string(id);
  for (size_t i = us + 1; i < id.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(id[i]))) return std::string(id);
  return std::string(id.substr(0, us));
}

const char* preposition_for(std::string_view type) {
  const TypeInfo* t = find_type(type);
  return t && t->surface ? "on" : "in";
}

bool receptacle_accepts(const TypeInfo& receptacle, const TypeInfo& item) {
  if (!receptacle.receptacle || !item.portable) return false;
  // One level of nesting only: a bowl goes in the fridge, never in a box.
  if (receptacle.portable && item.receptacle) return false;
  if (receptacle.accepts.empty()) return true;
  return std::find(receptacle.accepts.begin(), receptacle.accepts.end(), item.category) !=
         receptacle.accepts.end();
}

std::string display_name(std::string_view type) {
  std::string s(type);
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

std::string plural_of(std::string_view type) {
  std::string s = display_name(type);
  auto ends = [&](std::string_view suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("fe")) return s.substr(0, s.size() - 2) + "ves";
  if (ends("ch") || ends("sh") || ends("x") || ends("s") || ends("o")) return s + "es";
  return s + "s";
}

}  // namespace engram::env
