#include "core/tokenizer/stop_strings.h"

#include <algorithm>

namespace engram {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stop_strings_.push_back(std::move(s));
  }
}

std::string StopStringMatcher::push(std::string_view chunk) {
  if (stopped_) return {};
  held_.append(chunk);

  // Everything before held_ was released because no stop string could start there, so the
  // earliest match lies inside held_.
  size_t stop_at = std::string::npos;
  for (const auto& stop : stop_strings_) {
    const size_t at = held_.find(stop);
    if (at < stop_at ||
        (at == stop_at && at != std::string::npos && stop.size() > matched_.size())) {
      stop_at = at;
      matched_ = stop;
    }
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string before = held_.substr(0, stop_at);
    held_.clear();
    return before;
  }

  // Hold the longest suffix that is a proper prefix of some stop string. Stop strings are valid
  // UTF-8, so such a suffix starts on a character boundary and the released part stays valid.
  size_t keep = 0;
  for (const auto& stop : stop_strings_) {
    const size_t longest = std::min(held_.size(), stop.size() - 1);
    for (size_t n = longest; n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string released = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return released;
}

std::string StopStringMatcher::finish() {
  if (stopped_) return {};
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace engram
