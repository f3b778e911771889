#include "core/engine/turn_progress.h"

namespace engram {
namespace {

// 20017 -> "20,017"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

std::string describe_turn_progress(const TurnProgress& p) {
  const std::string of = grouped(p.done) + " of " + grouped(p.total);
  switch (p.stage) {
    case TurnProgress::Stage::kIndexing:
      return "Indexing the conversation: " + of + " windows";
    case TurnProgress::Stage::kBuilding:
      return "Building episode " + std::to_string(p.episode + 1) + " of " +
             std::to_string(p.episodes) + " from the history: " + of + " tokens";
    case TurnProgress::Stage::kPreparing:
      return "Preparing episode " + std::to_string(p.episode + 1) + " of " +
             std::to_string(p.episodes) + " for the next turn: " + of + " tokens";
    case TurnProgress::Stage::kReading:
      break;
  }
  return "Reading the conversation: " + of + " tokens";
}

}  // namespace engram
