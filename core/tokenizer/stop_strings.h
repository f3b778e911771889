// Stop strings over streamed text. Fed the chunks a TokenStream returns, it releases only text
// that cannot be the start of a stop string, holds the rest, and on a complete stop string
// returns the text before it and reports the stop, so the reader never sees part of "<|im_end|>".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace engram {

class StopStringMatcher {
 public:
  // Empty strings are ignored; with no stop strings every chunk passes straight through.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Text that is safe to show now. After a stop, returns the text before the stop string once and
  // then only empty strings.
  std::string push(std::string_view chunk);
  // The held tail, for when generation ends without a stop (EOS, length limit).
  std::string finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched; empty before a stop.
  const std::string& matched() const { return matched_; }
  // Bytes currently held back as a possible start of a stop string.
  size_t held_size() const { return held_.size(); }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace engram
