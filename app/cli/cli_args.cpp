#include "app/cli/cli_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>

namespace engram::cli {
namespace {

// CLI11's messages, e.g. "The following arguments were not expected: --seeed", as one line.
std::string readable(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  while (!message.empty() && message.back() == ' ')
    message.pop_back();
  return message;
}

}  // namespace

Args::Args(int argc, char** argv, int first, const std::set<std::string>& with_value,
           const std::set<std::string>& flags) {
  // CLI11 parses (--name value, --name=value, bare flags, positionals, "--" ends options); this
  // class keeps the typed getters whose errors name the flag, so every command reads flags the
  // same way it did with the hand-written parser this replaced.
  CLI::App app;
  app.set_help_flag();  // --help is not an option of a subcommand here: usage() prints it
  app.allow_extras(false);
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
  for (const std::string& name : with_value) {
    options[name] = app.add_option("--" + name, values[name])
                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                        ->allow_extra_args(false);
  }
  for (const std::string& name : flags) {
    if (with_value.count(name)) throw std::logic_error("--" + name + " is a flag and an option");
    options[name] = app.add_flag("--" + name);
  }
  app.add_option("positional", positional_);
  std::vector<std::string> args(argv + std::min(first, argc), argv + argc);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    // "--seed: 1 required TEXT missing" -> "--seed needs a value"
    const std::string what = e.what();
    throw UsageError(what.rfind("--", 0) == 0 && what.find(':') != std::string::npos
                         ? what.substr(0, what.find(':')) + " needs a value"
                         : readable(what));
  } catch (const CLI::ParseError& e) {
    throw UsageError(readable(e.what()));
  }
  for (const auto& [name, option] : options) {
    if (option->count() == 0) continue;
    values_[name] = flags.count(name) ? "1" : values[name];
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
