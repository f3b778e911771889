#include "app/cli/model_loading.h"

#include <unistd.h>

#include <cstdio>

#include "core/log.h"
#include "core/model/model_error.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/policy_registry.h"
#include "storage/profile_paths.h"

namespace engram::cli {

std::set<std::string> model_flags_with_value() {
  return {"model", "shape", "device", "dtype", "seed", "log-level"};
}

LoadedModel load_model_from_args(const Args& args, bool allow_shape) {
  if (args.has("log-level")) log::set_level(log::parse_level(args.str("log-level", "warn")));
  ModelSource source;
  if (args.has("model") == args.has("shape")) {
    throw UsageError(allow_shape ? "give exactly one of --model DIR and --shape NAME"
                                 : "--model DIR is required");
  }
  if (args.has("shape")) {
    if (!allow_shape) throw UsageError("--shape is for `engram-cli bench` only");
    source.shape = args.str("shape", "");
  } else {
    source.dir = args.str("model", "");
  }
  source.seed = static_cast<uint64_t>(args.integer("seed", 0));
  const DeviceChoice device = choose_device(args.str("device", "auto"), args.str("dtype", "auto"));
  const bool tty = isatty(STDERR_FILENO);
  int last_percent = -1;
  auto progress = [&](const LoadProgress& p) {
    const int percent =
        p.bytes_total ? static_cast<int>(100.0 * p.bytes_done / p.bytes_total) : 100;
    if (!tty || percent == last_percent) return;
    last_percent = percent;
    const int width = 30;
    const int filled = percent * width / 100;
    std::fprintf(stderr, "\rloading [%.*s%*s] %3d%% %.1f/%.1f MB %.1f s", filled,
                 "##############################", width - filled, "", percent, p.bytes_done / 1e6,
                 p.bytes_total / 1e6, p.seconds);
    std::fflush(stderr);
  };
  LoadedModel m = load_model(source, device, progress);
  if (tty && last_percent >= 0) std::fprintf(stderr, "\n");
  // EpiCache's layer calibration of these weights, when `engram-cli calibrate` stored one.
  const std::filesystem::path profile = args.has("profile")
                                            ? std::filesystem::path(args.str("profile", ""))
                                            : storage::default_profile_dir();
  try {
    m.layer_calibration = find_layer_calibration(profile, m.fingerprint, m.config.num_layers);
  } catch (const LayerCalibrationError& e) {
    std::fprintf(stderr, "warning: %s\n", e.what());
  }
  std::fprintf(stderr, "loaded %s: %lld layers, %.1f M parameters, %s %s, %.2f s\n", m.name.c_str(),
               static_cast<long long>(m.config.num_layers), m.config.parameter_count() / 1e6,
               device.device.str().c_str(), c10::toString(device.compute_dtype), m.load_seconds);
  return m;
}

LoadedModel load_text_model_from_args(const Args& args, const std::string& command) {
  LoadedModel m = load_model_from_args(args, /*allow_shape=*/false);
  if (!m.tokenizer)
    throw ModelError(args.str("model", ""),
                     command + " needs tokenizer.model or tokenizer.json in the model folder");
  return m;
}

void require_model_or_shape(const Args& args, const std::string& command) {
  const bool use_shape = args.has("shape");
  if (args.has("model") == use_shape)
    throw UsageError(command + " needs --model DIR or --shape NAME --tokenizer FILE");
  if (use_shape != args.has("tokenizer"))
    throw UsageError("--tokenizer FILE goes with --shape (a model folder has its own)");
}

LoadedModel load_model_or_shape(const Args& args, const std::string& command,
                                const DeviceChoice& device) {
  if (!args.has("shape")) return load_text_model_from_args(args, command);  // says what it loaded
  if (args.has("log-level")) log::set_level(log::parse_level(args.str("log-level", "warn")));
  ModelSource source;
  source.shape = args.str("shape", "");
  source.tokenizer = args.str("tokenizer", "");
  source.seed = static_cast<uint64_t>(args.integer("seed", 0));
  LoadedModel model = load_model(source, device, {});
  std::fprintf(stderr, "loaded %s (%s, %s) in %.1f s\n", model.name.c_str(),
               model.decoder->device().str().c_str(), c10::toString(model.decoder->dtype()),
               model.load_seconds);
  return model;
}

std::set<std::string> policy_flags() {
  return {"policy", "kv-budget", "profile"};  // the profile holds the layer calibration
}

PolicyChoice policy_choice_from_args(const Args& args, const std::string& fallback) {
  PolicyChoice choice{args.str("policy", fallback), args.integer("kv-budget", 0)};
  try {
    auto policy = make_policy(choice.spec);
    if (choice.kv_budget < 0) throw std::invalid_argument("--kv-budget must not be negative");
    if (choice.kv_budget > 0 && choice.kv_budget < 16)
      throw std::invalid_argument("--kv-budget must be at least 16 tokens");
    if (policy->keeps_every_token() && choice.kv_budget > 0) {
      throw std::invalid_argument("policy '" + policy->name() +
                                  "' keeps every token in the working set; --kv-budget needs a "
                                  "policy that evicts (streaming, snapkv; a retrieval budget is "
                                  "louiskv:budget=N)");
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return choice;
}

std::unique_ptr<MemoryPolicy> policy_from_args(const Args& args, const std::string& fallback,
                                               const LoadedModel& model, int64_t block) {
  const PolicyChoice choice = policy_choice_from_args(args, fallback);
  std::string note;
  auto policy =
      make_policy(choice.spec, choice.kv_budget, model.config.max_positions, block, &note);
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  if (auto* epi = dynamic_cast<EpiCachePolicy*>(policy.get())) {
    note =
        apply_layer_calibration(*epi, model.layer_calibration, model.config.max_positions - block);
    if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  return policy;
}

std::unique_ptr<KvWorkingSet> working_set_for(const MemoryPolicy& policy, const LoadedModel& model,
                                              int64_t block) {
  const ModelConfig& c = model.config;
  return std::make_unique<KvWorkingSet>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim},
                                        policy.budget() > 0 ? policy.budget() + block : 0,
                                        model.decoder->dtype(), model.decoder->device(),
                                        c.max_positions);
}

}  // namespace engram::cli
