#include "core/env/household_action.h"

#include <cctype>
#include <sstream>
#include <vector>

#include "core/env/household_catalog.h"

namespace engram::env {
namespace {

std::vector<std::string> words_of(std::string_view text) {
  std::string lowered(text);
  for (char& c : lowered)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::istringstream in(lowered);
  std::vector<std::string> words;
  std::string w;
  while (in >> w) {
    while (!w.empty() && (w.back() == '.' || w.back() == ','))
      w.pop_back();
    if (w.empty() || w == "a" || w == "an" || w == "the") continue;
    words.push_back(w);
  }
  return words;
}

std::string join_name(const std::vector<std::string>& words, size_t from, size_t to) {
  std::string name;
  for (size_t i = from; i < to; ++i) {
    if (!name.empty()) name += '_';
    name += words[i];
  }
  return name;
}

struct VerbSpelling {
  Verb verb;
  std::vector<std::string> words;
};

const std::vector<VerbSpelling>& spellings() {
  static const std::vector<VerbSpelling> s = {
      {Verb::kGoTo, {"go", "to"}},       {Verb::kFind, {"find"}},
      {Verb::kPickUp, {"pick", "up"}},   {Verb::kPut, {"put"}},
      {Verb::kOpen, {"open"}},           {Verb::kClose, {"close"}},
      {Verb::kSlice, {"slice"}},         {Verb::kTurnOn, {"turn", "on"}},
      {Verb::kTurnOff, {"turn", "off"}}, {Verb::kHeat, {"heat"}},
      {Verb::kCool, {"cool"}},           {Verb::kClean, {"clean"}}};
  return s;
}

}  // namespace

const char* verb_name(Verb verb) {
  switch (verb) {
    case Verb::kGoTo:
      return "go to";
    case Verb::kFind:
      return "find";
    case Verb::kPickUp:
      return "pick up";
    case Verb::kPut:
      return "put";
    case Verb::kOpen:
      return "open";
    case Verb::kClose:
      return "close";
    case Verb::kSlice:
      return "slice";
    case Verb::kTurnOn:
      return "turn on";
    case Verb::kTurnOff:
      return "turn off";
    case Verb::kHeat:
      return "heat";
    case Verb::kCool:
      return "cool";
    case Verb::kClean:
      return "clean";
  }
  return "?";
}

std::optional<Action> parse_action(std::string_view text, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<Action> {
    if (error) *error = why;
    return std::nullopt;
  };
  const std::vector<std::string> words = words_of(text);
  if (words.empty()) return fail("empty action");
  for (const VerbSpelling& s : spellings()) {
    if (words.size() < s.words.size()) continue;
    bool match = true;
    for (size_t i = 0; i < s.words.size(); ++i)
      match = match && words[i] == s.words[i];
    if (!match) continue;
    const size_t first = s.words.size();
    if (first >= words.size())
      return fail(std::string("'") + verb_name(s.verb) + "' needs an object");
    Action a;
    a.verb = s.verb;
    if (s.verb != Verb::kPut) {
      a.target = join_name(words, first, words.size());
      return a;
    }
    size_t prep = 0;
    for (size_t i = first + 1; i + 1 < words.size(); ++i)
      if (words[i] == "in" || words[i] == "on" || words[i] == "into" || words[i] == "onto")
        prep = i;
    if (prep == 0) return fail("'put' needs 'X in Y' or 'X on Y'");
    a.target = join_name(words, first, prep);
    a.destination = join_name(words, prep + 1, words.size());
    return a;
  }
  return fail("unknown verb '" + words[0] + "'");
}

std::string to_string(const Action& action) {
  std::string s = std::string(verb_name(action.verb)) + " " + action.target;
  if (action.verb == Verb::kPut)
    s += std::string(" ") + preposition_for(type_of_id(action.destination)) + " " +
         action.destination;
  return s;
}

}  // namespace engram::env
