// engram-cli calibrate (issue 15, EpiCache §3.2): measures each layer's key cosine between the
// full causal mask and the block mask (core/engine/layer_sensitivity.h) on one text, prints σ and
// the layer budgets it gives, and stores it in the profile keyed by the model's fingerprint, where
// the EpiCache policy's layer budgets come from.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/engine/layer_sensitivity.h"
#include "core/env/conversation_format.h"
#include "core/env/conversation_generator.h"
#include "core/policies/layer_budget.h"
#include "storage/profile_paths.h"

namespace engram::cli {
namespace {

// The budgets shown: Engram's EpiCache evaluation budgets (docs/epicache.md).
constexpr int64_t kShownBudgets[] = {512, 1024, 2048};

int64_t at_least(const Args& args, const std::string& name, int64_t fallback, int64_t least) {
  const int64_t v = args.integer(name, fallback);
  if (v < least) throw UsageError("--" + name + " must be at least " + std::to_string(least));
  return v;
}

std::vector<int64_t> encode_text(const Tokenizer& tokenizer, const std::string& text, bool bos) {
  std::vector<int64_t> ids;
  if (bos && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  for (int32_t id : tokenizer.encode(text))
    ids.push_back(id);
  return ids;
}

// Conversations from the conversation world (as `eval conversation` renders their history),
// seed after seed, until `tokens` are there; cut to `tokens`.
std::vector<int64_t> conversation_tokens(const Tokenizer& tokenizer, uint64_t seed, int64_t tokens,
                                         std::string* description) {
  std::vector<int64_t> ids;
  uint64_t last = seed;
  for (uint64_t s = seed; static_cast<int64_t>(ids.size()) < tokens; ++s) {
    env::ConversationConfig config;
    config.seed = s;
    config.min_tokens = std::max<int64_t>(config.min_tokens, tokens);
    config.max_tokens = std::max<int64_t>(config.max_tokens, 2 * tokens);
    const env::Conversation c = env::generate_conversation(config);
    // The first with the QA instruction, as eval conversation renders a history; the next ones
    // continue it after a blank line.
    std::string text = s == seed ? env::qa_history_prompt(c.utterances, 0, c.utterances.size())
                                 : std::string("\n");
    if (s != seed) text += env::render_history(c.utterances, 0, c.utterances.size());
    const std::vector<int64_t> more = encode_text(tokenizer, text, /*bos=*/s == seed);
    ids.insert(ids.end(), more.begin(), more.end());
    last = s;
  }
  ids.resize(static_cast<size_t>(tokens));
  *description = "conversation seed " + std::to_string(seed);
  if (last != seed) description->append("-").append(std::to_string(last));
  return ids;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--text " + path + ": cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void print_table(const LayerCalibration& c, int64_t ceiling) {
  std::printf("%-6s %-10s %-10s", "layer", "sigma", "1-sigma");
  for (int64_t m : kShownBudgets)
    std::printf(" %8s", ("M=" + std::to_string(m)).c_str());
  std::printf("\n");
  std::vector<std::vector<int64_t>> budgets;
  for (int64_t m : kShownBudgets)
    budgets.push_back(allocate_layer_budgets(c.key_cosine, m, c.alpha, std::max(m, ceiling)));
  for (size_t l = 0; l < c.key_cosine.size(); ++l) {
    std::printf("%-6zu %-10.6f %-10.6f", l, c.key_cosine[l], 1.0 - c.key_cosine[l]);
    for (const auto& b : budgets)
      std::printf(" %8lld", static_cast<long long>(b[l]));
    std::printf("\n");
  }
}

}  // namespace

int run_calibrate(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"text", "tokens", "sink", "window", "block", "alpha", "profile", "json"});
  const Args args(argc, argv, 2, with_value, {});
  // Flags first: a typo fails before the (slow) model load. Defaults: the authors' sink 128,
  // blocks of 4096 and half a block of overlap, scaled to Engram's block of 512.
  const int64_t sink = at_least(args, "sink", 16, 0);
  const int64_t window = at_least(args, "window", 256, 0);
  const int64_t block = at_least(args, "block", 2 * std::max<int64_t>(window, 1), 1);
  const double alpha = args.real("alpha", 2.0);
  if (!(alpha >= 0) || !std::isfinite(alpha)) throw UsageError("--alpha must be >= 0");
  const int64_t seed = at_least(args, "seed", 1, 0);  // the conversation's seed (no --text)
  const std::filesystem::path profile = args.has("profile")
                                            ? std::filesystem::path(args.str("profile", ""))
                                            : storage::default_profile_dir();
  std::string text;
  if (args.has("text")) text = read_text_file(args.str("text", ""));

  LoadedModel model = load_text_model_from_args(args, "calibrate");
  const int64_t most = std::min<int64_t>(2048, model.config.max_positions);
  const int64_t tokens = at_least(args, "tokens", most, 1);
  if (tokens > model.config.max_positions)
    throw UsageError("--tokens " + std::to_string(tokens) + " exceeds the model's " +
                     std::to_string(model.config.max_positions) + " positions");
  std::string description;
  std::vector<int64_t> ids;
  if (args.has("text")) {
    ids = encode_text(*model.tokenizer, text, /*bos=*/true);
    if (static_cast<int64_t>(ids.size()) > tokens) ids.resize(static_cast<size_t>(tokens));
    description = "file " + std::filesystem::path(args.str("text", "")).filename().string();
  } else {
    ids = conversation_tokens(*model.tokenizer, static_cast<uint64_t>(seed), tokens, &description);
  }
  std::fprintf(stderr, "calibrating on %zu tokens (%s): sink %lld, window %lld, block %lld\n",
               ids.size(), description.c_str(), static_cast<long long>(sink),
               static_cast<long long>(window), static_cast<long long>(block));

  const bool tty = isatty(STDERR_FILENO);
  const auto progress = [&](int64_t done, int64_t total) {
    const char* pass = 2 * done <= total ? "full mask" : "block mask";
    const int percent = static_cast<int>(100 * done / total);
    if (tty) {
      std::fprintf(stderr, "\rcalibrate: %3d%% (%s)   ", percent, pass);
      if (done == total) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "calibrate: %3d%% (%s, block %lld of %lld)\n", percent, pass,
                   static_cast<long long>(done), static_cast<long long>(total));
    }
    std::fflush(stderr);
  };
  LayerCalibration c = calibrate_layers(model, ids, sink, window, block, progress);
  c.text = description;
  c.alpha = alpha;

  std::printf("model %s (fingerprint %s), %lld tokens of %s, %s\n", c.model_name.c_str(),
              c.model_fingerprint.c_str(), static_cast<long long>(c.tokens), c.text.c_str(),
              c.dtype.c_str());
  // No layer can hold more than the model's positions.
  const int64_t ceiling = model.config.max_positions;
  std::printf(
      "budgets: w_l = (1 - sigma_l)^%.3g, M_l = L*M*w_l/sum(w), at least M/4, at most %lld\n",
      c.alpha, static_cast<long long>(ceiling));
  print_table(c, ceiling);

  const std::filesystem::path stored = layer_calibration_path(profile, c.model_fingerprint);
  write_layer_calibration(stored, c);
  std::printf("stored %s\n", stored.string().c_str());
  if (args.has("json")) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(layer_calibration_to_json(c));
    for (int64_t m : kShownBudgets)
      j["budgets"][std::to_string(m)] =
          allocate_layer_budgets(c.key_cosine, m, c.alpha, std::max(m, ceiling));
    j["budget_ceiling"] = ceiling;
    j["stored"] = stored.string();
    const std::string path = args.str("json", "");
    std::ofstream out(path);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error("--json " + path + ": cannot be written");
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace engram::cli
