#include "app/cli/cli_args.h"

#include <sstream>

namespace engram::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& with_value,
           const std::set<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name)) {
      values_[name] = "1";
    } else if (with_value.count(name)) {
      if (inline_value) {
        values_[name] = *inline_value;
      } else if (i + 1 < argc) {
        values_[name] = argv[++i];
      } else {
        throw UsageError("--" + name + " needs a value");
      }
    } else {
      throw UsageError("unknown option --" + name);
    }
  }
}

bool Args::has(const std::string& name) const {
  return values_.count(name) > 0;
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError("--" + name + " is required");
  return it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument(it->second);
    return v;
  } catch (const std::exception&) {
    throw UsageError("--" + name + " expects an integer, got '" + it->second + "'");
  }
}

double Args::real(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument(it->second);
    return v;
  } catch (const std::exception&) {
    throw UsageError("--" + name + " expects a number, got '" + it->second + "'");
  }
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UsageError("--ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) throw UsageError("--ids is empty");
  return ids;
}

}  // namespace engram::cli
