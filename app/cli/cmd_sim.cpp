// engram-cli sim: one household session in the terminal; a person types the actions (reads
// stdin, so a script can pipe actions in), or with --model DIR the model plans in closed loop
// (model proposes, simulator executes, memory updates); either way the terminal shows each
// action's outcome, the memory segments that changed and the task progress. engram-cli export
// embodied: expert trajectories as JSON lines, the training and evaluation data of the embodied
// world (core/env/embodied_export.h); with --model DIR the model drives and the expert labels
// every state (DAgger).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "app/cli/cli_args.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/model_planner.h"
#include "core/env/embodied_export.h"
#include "core/env/expert_planner.h"
#include "core/env/household_session.h"

namespace engram::cli {
namespace {

using env::HouseholdSession;
using env::MemorySegment;

void print_segment(const MemorySegment& s) {
  std::printf("  [v%lld] %s\n", static_cast<long long>(s.version), s.text.c_str());
}

void print_memory(const HouseholdSession& session, bool examples) {
  std::printf("memory (%zu segments):\n", session.memory().size());
  for (const MemorySegment& s : session.memory())
    if (examples || s.kind != "example") print_segment(s);
}

void print_task(const HouseholdSession& session) {
  const env::Task* task = session.current_task();
  if (!task) return;
  std::printf("\ntask %zu of %zu: %s%s\n", session.current_index() + 1, session.tasks().size(),
              task->instruction().c_str(), task->needs_key ? "  (it is locked away)" : "");
}

void print_progress(const HouseholdSession& session) {
  const env::Task* task = session.current_task();
  if (!task) return;
  const std::vector<std::string> names = env::subgoal_names(*task);
  const std::vector<bool> now = env::subgoals_holding(session.world(), *task);
  std::printf("progress:");
  for (size_t i = 0; i < names.size(); ++i)
    std::printf(" [%c] %s", now[i] ? 'x' : ' ', names[i].c_str());
  std::printf("\n");
}

void print_help() {
  std::printf(
      "actions: go to ROOM | find X | pick up X | put X in/on Y | open X | close X | slice X |\n"
      "         turn on X | turn off X | heat X | cool X | clean X   (X: an id like apple_1)\n"
      "other:   memory (all segments) | hint (the expert's next action) | skip (give up the task)\n"
      "         help | quit\n");
}

void print_summary(const HouseholdSession& session) {
  int solved = 0, reached = 0, subgoals = 0;
  for (const env::TaskRecord& r : session.records()) {
    solved += r.success ? 1 : 0;
    for (bool b : r.subgoals_reached) {
      reached += b ? 1 : 0;
      ++subgoals;
    }
  }
  std::printf("\nsession over: %d of %zu tasks solved, %d of %d subgoals, %lld steps\n", solved,
              session.tasks().size(), reached, subgoals,
              static_cast<long long>(session.step_count()));
}

// Executes one action and shows what happened: the outcome, the changed segments, the progress
// or the end of the task.
void play(HouseholdSession& session, const env::Action& action) {
  const size_t task_before = session.current_index();
  const env::StepOutcome out = session.step(action);
  std::printf("%s%s\n", out.result.ok ? "" : "failed: ", out.result.message.c_str());
  for (const MemorySegment& s : session.memory())
    if (s.last_changed_step == session.step_count() && s.kind != "history") print_segment(s);
  if (out.task_ended) {
    const env::TaskRecord& r = session.records()[task_before];
    std::printf("task %zu %s in %d steps\n", task_before + 1, r.success ? "done" : "failed",
                r.steps);
    // A later task can already hold when it starts; those are reported as done in 0 steps.
    for (size_t i = task_before + 1; i < session.records().size(); ++i)
      std::printf("task %zu was already done\n", i + 1);
    print_task(session);
  } else {
    print_progress(session);
  }
}

}  // namespace

int run_sim(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"seed", "tasks", "max-steps"});
  const Args args(argc, argv, 2, with_value, {});
  const int64_t tasks = args.integer("tasks", 5);
  const int64_t max_steps = args.integer("max-steps", 60);
  if (tasks < 1) throw UsageError("--tasks must be at least 1");
  if (max_steps < 1) throw UsageError("--max-steps must be at least 1");
  const bool interactive = isatty(STDIN_FILENO);
  std::unique_ptr<LoadedModel> model;
  if (args.has("model")) {
    model = std::make_unique<LoadedModel>(load_text_model_from_args(args, "sim"));
  }
  HouseholdSession session({static_cast<uint64_t>(args.integer("seed", 0)), static_cast<int>(tasks),
                            static_cast<int>(max_steps)});
  std::printf(
      "household seed %lld, %zu tasks. %s\n", static_cast<long long>(args.integer("seed", 0)),
      session.tasks().size(),
      model ? ("The model " + model->name + " plans.").c_str() : "Type 'help' for the actions.");
  print_memory(session, false);
  print_task(session);
  std::string line;
  while (!session.finished()) {
    if (model) {
      const PlannerProposal p = propose_action(*model, session);
      std::printf("model> %s%s\n", p.text.c_str(),
                  p.parsed ? "" : ("   (not an action: " + p.parse_error + ")").c_str());
      play(session, p.action);
      continue;
    }
    if (interactive) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    if (!interactive) std::printf("> %s\n", line.c_str());
    if (line == "quit" || line == "exit") break;
    if (line == "help") {
      print_help();
      continue;
    }
    if (line == "memory") {
      print_memory(session, true);
      continue;
    }
    if (line == "hint") {
      const auto a = env::expert_next_action(session.world(), *session.current_task());
      std::printf("expert: %s\n", a ? env::to_string(*a).c_str() : "(no plan)");
      continue;
    }
    if (line == "skip") {
      session.abandon_task();
      std::printf("task given up\n");
      print_task(session);
      continue;
    }
    std::string error;
    const std::optional<env::Action> action = env::parse_action(line, &error);
    if (!action) {
      std::printf("not an action: %s (type 'help')\n", error.c_str());
      continue;
    }
    play(session, *action);
  }
  print_summary(session);
  return 0;
}

int run_export_embodied(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"out", "sessions", "tasks", "max-steps", "history", "detours", "model-share"});
  const Args args(argc, argv, 3, with_value, {});
  env::EmbodiedExportOptions o;
  o.first_seed = static_cast<uint64_t>(args.integer("seed", 0));
  o.sessions = static_cast<int>(args.integer("sessions", 100));
  o.tasks_per_session = static_cast<int>(args.integer("tasks", 5));
  o.max_steps_per_task = static_cast<int>(args.integer("max-steps", 60));
  o.prompt.max_history = static_cast<int>(args.integer("history", 8));
  o.detour_probability = args.real("detours", 0.0);
  if (o.detour_probability < 0 || o.detour_probability >= 1)
    throw UsageError("--detours is a probability in [0, 1)");
  if (o.sessions < 1 || o.tasks_per_session < 1 || o.max_steps_per_task < 1)
    throw UsageError("--sessions, --tasks and --max-steps must be at least 1");
  // --model: DAgger, the model takes (a share of) the steps and the expert labels every state.
  std::unique_ptr<LoadedModel> model;
  if (args.has("model")) {
    model = std::make_unique<LoadedModel>(load_text_model_from_args(args, "export"));
    o.planner = [&model](const HouseholdSession& s) { return propose_action(*model, s).action; };
    o.planner_share = args.real("model-share", 1.0);
    if (o.planner_share <= 0 || o.planner_share > 1)
      throw UsageError("--model-share is a probability in (0, 1]");
  }
  const std::string path = args.str("out", "-");
  env::EmbodiedExportStats stats;
  if (path == "-") {
    stats = env::export_embodied(o, std::cout);
  } else {
    std::ofstream file(path);
    if (!file) throw std::runtime_error("cannot write " + path);
    stats = env::export_embodied(o, file);
    file.close();
    if (!file) throw std::runtime_error("write failed: " + path);
  }
  std::fprintf(
      stderr,
      "embodied: %lld lines from %d sessions (seeds %llu..%llu), %lld/%lld tasks solved %s, "
      "%lld detours, %lld model steps (%lld not the expert's), prompt chars mean %.0f max "
      "%lld\n",
      static_cast<long long>(stats.lines), o.sessions,
      static_cast<unsigned long long>(o.first_seed),
      static_cast<unsigned long long>(o.first_seed + o.sessions - 1),
      static_cast<long long>(stats.tasks_solved), static_cast<long long>(stats.tasks),
      model ? "with the model driving" : "by the expert", static_cast<long long>(stats.detours),
      static_cast<long long>(stats.planner_steps),
      static_cast<long long>(stats.planner_disagreements), stats.mean_prompt_chars,
      static_cast<long long>(stats.max_prompt_chars));
  return 0;
}

}  // namespace engram::cli
