// Command-line flags: `--name value`, `--name=value` and bare `--flag` (parsed by CLI11), with
// typed getters whose errors name the flag. Unknown flags are errors (a typo must not silently
// change a benchmark).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace engram::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // `flags` take no value; every other known name takes one.
  Args(int argc, char** argv, int first, const std::set<std::string>& with_value,
       const std::set<std::string>& flags);

  bool has(const std::string& name) const;
  std::string str(const std::string& name, const std::string& fallback) const;
  std::string required(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double real(const std::string& name, double fallback) const;
  std::vector<std::string> positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// "1,523,87" -> ids; UsageError naming the bad item.
std::vector<int64_t> parse_ids(const std::string& text);

}  // namespace engram::cli
