// engram-cli eval keep: fidelity of selective recomputation (issue 16) on the household planner.
// An expert drives each episode (so every method sees the same states); at each state the prompt
// is assembled from the retrieved memory segments (app/cli/keep_household.h) at each segment
// count, and every method prefills it through the same runner (core/engine/selective_recompute.h)
// over the same unit KV. Against a plain prefill of the same ids it reports, per method and
// count: next-action agreement (the greedy action line), first-token agreement and KL(full ||
// method) of the first token, the mean share of rows recomputed, agreement with the expert, and
// the prefill time (CPU: indicative only; TTFT is the GPU benchmark's). With --closed-loop each
// method's own proposals drive the world instead, and it reports success and subgoal success.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/keep_household.h"
#include "app/cli/model_loading.h"
#include "app/cli/model_planner.h"
#include "core/engine/selective_recompute.h"
#include "core/env/embodied_prompt.h"
#include "core/env/expert_planner.h"
#include "core/env/household_action.h"
#include "core/env/household_session.h"
#include "core/kv/cache_kv_source.h"
#include "core/tokenizer/token_stream.h"
#include "gpu/device_timeline.h"

namespace engram::cli {
namespace {

constexpr int64_t kMaxActionTokens = 24;  // the longest action is ~12 tokens

std::vector<int64_t> split_counts(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UsageError("--segments: '" + item + "' is not a positive count");
    }
  }
  if (out.empty()) throw UsageError("--segments: no count given");
  return out;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t greedy(const at::Tensor& logits, int64_t vocab_limit) {
  return logits.narrow(0, 0, std::min<int64_t>(vocab_limit, logits.size(0)))
      .argmax()
      .item<int64_t>();
}

// The action line decoded greedily from a prefilled cache whose last logits are `logits`.
std::string decode_line(const LoadedModel& model, KvCache& cache, at::Tensor logits) {
  const int64_t vocab = model.tokenizer->vocab_size();
  TokenStream stream(*model.tokenizer);
  std::string text;
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(model.decoder->device());
  for (int64_t i = 0; i < kMaxActionTokens; ++i) {
    const int64_t token = greedy(logits, vocab);
    if (token == model.tokenizer->eos_id()) break;
    text += stream.push(static_cast<int32_t>(token));
    if (text.find('\n') != std::string::npos || i + 1 == kMaxActionTokens) break;
    ForwardRequest step;
    step.tokens = {{token}};
    step.positions = {{cache.lengths()[0]}};
    step.phase = ForwardPhase::kDecode;
    logits = model.decoder->forward(step, source, timeline, nullptr).logits.reshape({-1});
  }
  text = text.substr(0, text.find('\n'));
  const auto first = text.find_first_not_of(" \t");
  const auto last = text.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
}

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

struct Tally {
  int64_t states = 0;
  int64_t action_agree = 0;
  int64_t first_token_agree = 0;
  int64_t expert_agree = 0;
  double kl_sum = 0;
  double kl_max = 0;
  double ratio_sum = 0;
  double prefill_ms_sum = 0;
  double units_sum = 0;
  double tokens_sum = 0;
  int64_t recomputed_unit_rows = 0;  // layers 1..L-1
  int64_t recomputed_example_rows = 0;
  int64_t example_tokens = 0;  // in the prompts
  int64_t unit_tokens = 0;
};

// Where the recomputation went: unit rows of layers 1..L-1 recomputed, and those of examples.
void count_recomputed(const SelectivePrefill& r, const KeepHouseholdPrompt& hp, Tally& t) {
  for (const UnitSpan& s : r.layout.units) {
    t.unit_tokens += s.tokens();
    if (hp.units[static_cast<size_t>(s.unit)].kind == "example") t.example_tokens += s.tokens();
  }
  for (size_t l = 1; l < r.plan.rows.size(); ++l)
    for (int64_t row : r.plan.rows[l]) {
      const int64_t u = r.layout.unit_of_row(row);
      if (u < 0) continue;
      ++t.recomputed_unit_rows;
      t.recomputed_example_rows += hp.units[static_cast<size_t>(u)].kind == "example";
    }
}

double kl_divergence(const at::Tensor& reference, const at::Tensor& method) {
  const at::Tensor p = at::log_softmax(reference.to(at::kDouble), 0);
  const at::Tensor q = at::log_softmax(method.to(at::kDouble), 0);
  return (p.exp() * (p - q)).sum().item<double>();
}

// The shared prefix (computed once) and every unit's KV (computed when its text changes).
struct UnitMemory {
  PrefixKv prefix;
  bool have_prefix = false;
  UnitKvStore store;

  AssembledPrompt assemble(const Decoder& decoder, const KeepHouseholdPrompt& hp) {
    if (!have_prefix) {
      prefix = compute_prefix_kv(decoder, hp.prefix);
      have_prefix = true;
    }
    AssembledPrompt assembled;
    assembled.prefix = &prefix;
    for (const MemoryUnit& u : hp.units)
      assembled.units.push_back(&store.get(decoder, prefix, u));
    assembled.query = hp.query;
    return assembled;
  }
};

struct LoopTally {
  int tasks = 0;
  int successes = 0;
  double subgoals = 0;
  int64_t steps = 0;
  int64_t invalid = 0;
};

// Closed loop: each method's own proposals drive the world (as `eval embodied` does for full KV).
nlohmann::json closed_loop(const LoadedModel& model, UnitMemory& memory,
                           std::vector<std::unique_ptr<RecomputePolicy>>& methods,
                           const std::vector<std::string>& labels,
                           const std::vector<int64_t>& counts, const Args& args, int64_t episodes,
                           uint64_t first_seed) {
  const Decoder& decoder = *model.decoder;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%8s %-20s %6s %8s %7s %7s\n", "segments", "method", "tasks", "SR", "sub-SR",
              "invalid");
  for (int64_t count : counts) {
    for (size_t m = 0; m < methods.size(); ++m) {
      LoopTally t;
      for (int64_t e = 0; e < episodes; ++e) {
        env::HouseholdSession session(episode_session_options(args, first_seed, e));
        while (!session.finished()) {
          const env::EmbodiedPrompt prompt = env::build_embodied_prompt(
              session.memory(), *session.current_task(), session.task_actions());
          const KeepHouseholdPrompt hp = assemble_household_prompt(*model.tokenizer, prompt, count);
          const AssembledPrompt assembled = memory.assemble(decoder, hp);
          KvCache cache(shape_of(model.config), 1, static_cast<int64_t>(assembled.tokens().size()),
                        decoder.dtype(), decoder.device());
          const SelectivePrefill r = selective_prefill(decoder, assembled, *methods[m], cache);
          const std::string text = decode_line(model, cache, r.logits);
          std::optional<env::Action> action = env::parse_action(text);
          t.invalid += action ? 0 : 1;
          // An unparseable line still costs a step; the world refuses it (as eval embodied).
          session.step(action ? *action
                              : env::Action{env::Verb::kFind, "unparsed(" + text + ")", ""});
          ++t.steps;
        }
        for (const env::TaskRecord& rec : session.records()) {
          ++t.tasks;
          t.successes += rec.success ? 1 : 0;
          const auto reached =
              std::count(rec.subgoals_reached.begin(), rec.subgoals_reached.end(), true);
          t.subgoals += rec.subgoals_reached.empty()
                            ? 0.0
                            : double(reached) / double(rec.subgoals_reached.size());
        }
      }
      const double n = std::max(1, t.tasks);
      std::printf("%8lld %-20s %6d %8.3f %7.3f %7lld\n", static_cast<long long>(count),
                  labels[m].c_str(), t.tasks, t.successes / n, t.subgoals / n,
                  static_cast<long long>(t.invalid));
      std::fflush(stdout);
      rows.push_back({{"segments", count},
                      {"method", labels[m]},
                      {"spec", methods[m]->spec()},
                      {"tasks", t.tasks},
                      {"steps", t.steps},
                      {"invalid_proposals", t.invalid},
                      {"success_rate", t.successes / n},
                      {"subgoal_success_rate", t.subgoals / n}});
    }
  }
  return rows;
}

}  // namespace

int run_eval_keep(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"episodes", "tasks", "max-steps", "segments", "methods", "every", "json"});
  const Args args(argc, argv, 3, with_value, {"closed-loop"});
  const std::vector<int64_t> counts = split_counts(args.str("segments", "10,20,30,40"));
  std::vector<std::unique_ptr<RecomputePolicy>> methods;
  const std::vector<std::string> labels =
      split_names(args.str("methods", "full-recompute,prefix-cache,full-reuse,cacheblend,keep"));
  for (const std::string& spec : labels)
    methods.push_back(make_recompute_policy(spec));  // a typo fails before the model loads
  const int64_t episodes = args.integer("episodes", 4);
  const int64_t every = std::max<int64_t>(1, args.integer("every", 1));
  const auto first_seed = static_cast<uint64_t>(args.integer("seed", 1));
  LoadedModel model = load_text_model_from_args(args, "eval");
  const Decoder& decoder = *model.decoder;
  if (!model.tokenizer) throw UsageError("the model has no tokenizer");

  UnitMemory memory;
  const auto t0 = std::chrono::steady_clock::now();
  if (args.has("closed-loop")) {
    nlohmann::json out;
    out["benchmark"] = "eval-keep-closed-loop";
    out["model"] = model.name;
    out["device"] = decoder.device().str();
    out["episodes"] = episodes;
    out["first_seed"] = first_seed;
    out["rows"] = closed_loop(model, memory, methods, labels, counts, args, episodes, first_seed);
    out["wall_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (args.has("json")) std::ofstream(args.str("json", "")) << out.dump(2) << '\n';
    return 0;
  }
  std::map<std::pair<int64_t, size_t>, Tally> tallies;  // (segments, method)
  int64_t states = 0, mismatched_tokens = 0, step_index = 0;
  for (int64_t e = 0; e < episodes; ++e) {
    env::HouseholdSession session(episode_session_options(args, first_seed, e));
    while (!session.finished()) {
      const std::optional<env::Action> expert =
          env::expert_next_action(session.world(), *session.current_task());
      if (!expert) {
        session.abandon_task();
        continue;
      }
      if (step_index++ % every == 0) {
        ++states;
        const env::EmbodiedPrompt prompt = env::build_embodied_prompt(
            session.memory(), *session.current_task(), session.task_actions());
        const std::string expert_text = env::to_string(*expert);
        for (int64_t count : counts) {
          const KeepHouseholdPrompt hp = assemble_household_prompt(*model.tokenizer, prompt, count);
          mismatched_tokens += hp.tokens_match_text ? 0 : 1;
          const AssembledPrompt assembled = memory.assemble(decoder, hp);
          const std::vector<int64_t> ids = assembled.tokens();

          // The reference: a plain prefill of the same ids.
          KvCache ref_cache(shape_of(model.config), 1, static_cast<int64_t>(ids.size()),
                            decoder.dtype(), decoder.device());
          at::Tensor ref_logits;
          {
            CacheKvSource source(ref_cache);
            gpu::DeviceTimeline timeline(decoder.device());
            ForwardRequest req;
            req.tokens = {ids};
            req.positions = {{}};
            for (size_t i = 0; i < ids.size(); ++i)
              req.positions[0].push_back(static_cast<int64_t>(i));
            ref_logits = decoder.forward(req, source, timeline, nullptr).logits.reshape({-1});
          }
          const int64_t ref_first = greedy(ref_logits, model.tokenizer->vocab_size());
          const std::string ref_text = decode_line(model, ref_cache, ref_logits);

          for (size_t m = 0; m < methods.size(); ++m) {
            KvCache cache(shape_of(model.config), 1, static_cast<int64_t>(ids.size()),
                          decoder.dtype(), decoder.device());
            const auto start = std::chrono::steady_clock::now();
            const SelectivePrefill r = selective_prefill(decoder, assembled, *methods[m], cache);
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count();
            const std::string text = decode_line(model, cache, r.logits);
            Tally& t = tallies[{count, m}];
            ++t.states;
            t.action_agree += text == ref_text;
            t.first_token_agree += greedy(r.logits, model.tokenizer->vocab_size()) == ref_first;
            t.expert_agree += text == expert_text;
            const double kl = kl_divergence(ref_logits, r.logits);
            t.kl_sum += kl;
            t.kl_max = std::max(t.kl_max, kl);
            t.ratio_sum += r.plan.mean_recompute_ratio(r.layout);
            t.prefill_ms_sum += ms;
            t.units_sum += static_cast<double>(hp.units.size());
            t.tokens_sum += static_cast<double>(ids.size());
            count_recomputed(r, hp, t);
          }
        }
      }
      session.step(*expert);
    }
    std::fprintf(stderr, "episode %lld/%lld done (%lld states)\n", static_cast<long long>(e + 1),
                 static_cast<long long>(episodes), static_cast<long long>(states));
  }

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%8s %-20s %6s %7s %7s %9s %9s %8s %8s %9s %8s\n", "segments", "method", "units",
              "tokens", "action", "1st-tok", "KL", "KL-max", "recomp", "prefill", "ex-share");
  for (const auto& [key, t] : tallies) {
    const double n = static_cast<double>(std::max<int64_t>(1, t.states));
    nlohmann::json row = {
        {"segments", key.first},
        {"method", labels[key.second]},
        {"spec", methods[key.second]->spec()},
        {"states", t.states},
        {"units_mean", t.units_sum / n},
        {"prompt_tokens_mean", t.tokens_sum / n},
        {"action_agreement", t.action_agree / n},
        {"first_token_agreement", t.first_token_agree / n},
        {"expert_agreement", t.expert_agree / n},
        {"kl_mean", t.kl_sum / n},
        {"kl_max", t.kl_max},
        {"recompute_ratio_mean", t.ratio_sum / n},
        {"prefill_ms_mean", t.prefill_ms_sum / n},
        {"example_token_share",
         double(t.example_tokens) / double(std::max<int64_t>(1, t.unit_tokens))},
        {"recomputed_example_share",
         double(t.recomputed_example_rows) / double(std::max<int64_t>(1, t.recomputed_unit_rows))}};
    std::printf("%8lld %-20s %6.1f %7.0f %7.3f %9.3f %9.5f %8.4f %8.3f %7.1fms %8.3f\n",
                static_cast<long long>(key.first), labels[key.second].c_str(), t.units_sum / n,
                t.tokens_sum / n, t.action_agree / n, t.first_token_agree / n, t.kl_sum / n,
                t.kl_max, t.ratio_sum / n, t.prefill_ms_sum / n,
                row["recomputed_example_share"].get<double>());
    rows.push_back(row);
  }
  nlohmann::json out;
  out["benchmark"] = "eval-keep";
  out["model"] = model.name;
  out["device"] = decoder.device().str();
  out["episodes"] = episodes;
  out["first_seed"] = first_seed;
  out["every"] = every;
  out["states"] = states;
  out["tokenization_mismatches"] = mismatched_tokens;
  out["unit_kv_computed"] = memory.store.computed();
  out["unit_kv_reused"] = memory.store.reused();
  out["rows"] = rows;
  out["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "states %lld, tokenization mismatches %lld, unit KV computed %lld / reused %lld, "
      "%.0f s\n",
      static_cast<long long>(states), static_cast<long long>(mismatched_tokens),
      static_cast<long long>(memory.store.computed()),
      static_cast<long long>(memory.store.reused()), out["wall_seconds"].get<double>());
  if (args.has("json")) std::ofstream(args.str("json", "")) << out.dump(2) << '\n';
  return 0;
}

}  // namespace engram::cli
