#include "storage/records.h"

#include <stdexcept>

namespace engram::storage {

std::string describe(const UnitRef& unit) {
  std::string owner =
      unit.conversation_id ? "conversation " + std::to_string(*unit.conversation_id) : "world";
  return owner + " " + unit.kind + " " + std::to_string(unit.id);
}

std::string describe(const KvBlobKey& key) {
  return describe(key.unit) + " layers [" + std::to_string(key.layer_begin) + ", " +
         std::to_string(key.layer_end) + ")";
}

const char* to_string(GroupState state) {
  return state == GroupState::kStatic ? "static" : "dynamic";
}

GroupState group_state_from_string(const std::string& text) {
  if (text == "static") return GroupState::kStatic;
  if (text == "dynamic") return GroupState::kDynamic;
  throw std::invalid_argument("memory group state '" + text + "' is neither static nor dynamic");
}

}  // namespace engram::storage
