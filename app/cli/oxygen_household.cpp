#include "app/cli/oxygen_household.h"

#include <stdexcept>

#include "core/env/embodied_prompt.h"
#include "core/env/household_action.h"
#include "core/tokenizer/tokenizer.h"

namespace engram::cli {
namespace {

// The chat corpus's lines (core/env/conversation_format.h): the header, then the turn.
constexpr const char* kSessionHeader = "Session 1 (February 11, 2024)\n";

std::string chat_suffix(const std::string& said) {
  return std::string(kSessionHeader) + "User said, \"" + said + "\"\nAssistant said,";
}

bool due(int64_t index, int64_t every) {
  return every > 0 && index % every == 0;
}

}  // namespace

HouseholdFrames::HouseholdFrames(const LoadedModel& model, HouseholdFrameOptions options)
    : model_(model), options_(std::move(options)), next_seed_(options_.seed) {
  if (!model_.tokenizer) throw std::invalid_argument("bench oxygen needs a model with a tokenizer");
}

std::vector<int64_t> HouseholdFrames::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  if (model_.tokenizer->bos_id() >= 0) ids.push_back(model_.tokenizer->bos_id());
  for (int32_t id : model_.tokenizer->encode(text))
    ids.push_back(id);
  return ids;
}

std::string HouseholdFrames::line(const GenerationState& s) const {
  std::vector<int32_t> ids;
  for (int64_t t : s.tokens()) {
    if (model_.config.is_eos(t)) break;
    ids.push_back(static_cast<int32_t>(t));
  }
  std::string text = model_.tokenizer->decode(ids);
  text = text.substr(0, text.find('\n'));
  const auto first = text.find_first_not_of(" \t");
  const auto last = text.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
}

GenerationLimits HouseholdFrames::limits(int64_t max_tokens) const {
  GenerationLimits l;
  l.max_new_tokens = max_tokens;
  l.vocab_limit = model_.tokenizer->vocab_size();
  const Tokenizer* tok = model_.tokenizer.get();
  // Every task answers one line: stop at the newline (the chat reply also ends with EOS).
  l.stop = [tok](const GenerationState& s) {
    std::vector<int32_t> ids(s.tokens().begin(), s.tokens().end());
    return tok->decode(ids).find('\n') != std::string::npos;
  };
  return l;
}

std::optional<Frame> HouseholdFrames::observe(int64_t index) {
  if (!session_ || session_->finished()) {
    env::SessionOptions so;
    so.seed = next_seed_++;
    so.task_count = options_.tasks_per_session;
    session_ = std::make_unique<env::HouseholdSession>(so);
  }
  const env::EmbodiedPrompt prompt = env::build_embodied_prompt(
      session_->memory(), *session_->current_task(), session_->task_actions());
  // The observation is the prompt without its final "next:"; the action asks for the next step.
  const std::string observation = prompt.text.substr(0, prompt.text.rfind("next:"));
  Frame f;
  f.action = {"action", encode(prompt.text), limits(options_.action_tokens)};
  if (due(index, options_.narrate_every)) {
    f.language.push_back({"narration", encode(observation + chat_suffix("What are you doing?")),
                          limits(options_.narration_tokens)});
  }
  if (due(index, options_.note_every)) {
    f.language.push_back(
        {"memory_note", encode(observation + "note:"), limits(options_.note_tokens)});
  }
  if (due(index, options_.chat_every) && !options_.chat_lines.empty()) {
    const auto turn = static_cast<size_t>(index / options_.chat_every);
    const std::string& said = options_.chat_lines[turn % options_.chat_lines.size()];
    f.language.push_back(
        {"chat", encode(observation + chat_suffix(said)), limits(options_.chat_tokens)});
  }
  return f;
}

void HouseholdFrames::act(int64_t /*index*/, const GenerationState& action) {
  const std::string text = line(action);
  std::string error;
  std::optional<env::Action> parsed = env::parse_action(text, &error);
  // An unparseable proposal still costs a step; the world refuses it (as model_planner does).
  const env::Action a =
      parsed ? *parsed : env::Action{env::Verb::kFind, "unparsed(" + text + ")", ""};
  actions_.push_back(text);
  const env::StepOutcome outcome = session_->step(a);
  if (outcome.task_ended) {
    ++tasks_ended_;
    if (outcome.task_success) ++tasks_succeeded_;
  }
}

void HouseholdFrames::language_done(int64_t index, const GenerationState& request) {
  const std::string text = line(request);
  finished_.push_back({index, request.task(), text});
  if (request.task() == "memory_note") {
    const int64_t step = session_ ? session_->step_count() : 0;
    notes_.update({{"note_" + std::to_string(request.id()), "note", "note: " + text}}, step);
  }
}

}  // namespace engram::cli
