#include "core/env/embodied_prompt.h"

namespace engram::env {

EmbodiedPrompt build_embodied_prompt(const std::vector<MemorySegment>& memory, const Task& task,
                                     const std::vector<std::string>& actions,
                                     const EmbodiedPromptOptions& options) {
  EmbodiedPrompt p;
  const std::string own_example = std::string("example_") + task_type_name(task.type);
  for (const MemorySegment& s : memory) {
    if (s.kind == "example" && s.key != own_example && s.key != "example_locked") continue;
    p.parts.push_back({s.key, s.kind, s.text + "\n", s.version});
  }
  std::string query = "task: " + task.instruction() + "\nhistory:";
  const size_t first = actions.size() > static_cast<size_t>(options.max_history)
                           ? actions.size() - options.max_history
                           : 0;
  if (first == 0 && actions.empty()) query += " none";
  if (first > 0) query += " ...;";
  for (size_t i = first; i < actions.size(); ++i)
    query += (i == first ? " " : "; ") + actions[i];
  query += "\nnext:";
  p.parts.push_back({"query", "query", query, 0});
  for (const PromptPart& part : p.parts)
    p.text += part.text;
  return p;
}

}  // namespace engram::env
