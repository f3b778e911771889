// engram-cli eval keep: fidelity of selective recomputation (issue 16) on the household planner.
// An expert drives each episode (so every method sees the same states); at each state the prompt
// is assembled from the retrieved memory segments (app/cli/keep_household.h) at each segment
// count, and every method prefills it through the same runner (core/engine/selective_recompute.h)
// over the same unit KV. Against a plain prefill of the same ids it reports, per method and
// count: next-action agreement (the greedy action line), first-token agreement and KL(full ||
// method) of the first token, the mean share of rows recomputed, agreement with the expert, and
// the prefill time (CPU: indicative only; TTFT is the GPU benchmark's). With --closed-loop each
// method's own proposals drive the world instead, and it reports success and subgoal success.
//
// --grouping (a comma list; default static-dynamic) picks the memory units (keep_household.h):
// segments (one KV each), static-dynamic (KEEP §4.1 groups), clusters (§4.1 as the paper states
// it: fixed semantic clusters, one unit while all members are static) or blocks:N. Every step
// (sampled or not) it counts the invalidation tokens: tokens of the assembled units whose KV is not
// held (a unit's KV is held from the last time it was assembled, by key and tokens), the prefill
// work memory updates cause before any recomputation for fidelity. Where static groups move
// segments out of the trained order it also measures what that costs: a plain prefill of the same
// segments in the trained order against a plain prefill of the assembled order.
//
// --trace FILE writes the keep method's executed plans (first grouping, first segment count, every
// state evaluated) as a recompute trace for the importance panel (core/policies/recompute_trace.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

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
#include "core/policies/recompute_trace.h"
#include "core/policies/text_embedding.h"
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

struct PlainPrefill {
  std::unique_ptr<KvCache> cache;
  at::Tensor logits;  // [vocab] of the last row
};

PlainPrefill plain_prefill(const Decoder& decoder, const std::vector<int64_t>& ids) {
  PlainPrefill out;
  out.cache =
      std::make_unique<KvCache>(shape_of(decoder.config()), 1, static_cast<int64_t>(ids.size()),
                                decoder.dtype(), decoder.device());
  CacheKvSource source(*out.cache);
  gpu::DeviceTimeline timeline(decoder.device());
  ForwardRequest req;
  req.tokens = {ids};
  req.positions = {{}};
  for (size_t i = 0; i < ids.size(); ++i)
    req.positions[0].push_back(static_cast<int64_t>(i));
  out.logits = decoder.forward(req, source, timeline, nullptr).logits.reshape({-1});
  return out;
}

std::vector<HouseholdGrouping> parse_groupings(const Args& args) {
  std::vector<HouseholdGrouping> out;
  std::stringstream in(args.str("grouping", "static-dynamic"));
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    try {
      out.push_back(parse_household_grouping(item));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--grouping: ") + e.what());
    }
    GroupingOptions& o = out.back().options;
    o.static_after = args.integer("static-after", o.static_after);
    o.max_group_segments = args.integer("group-max", o.max_group_segments);
    if (args.has("group-threshold")) o.join_threshold = std::stod(args.str("group-threshold", ""));
    if (args.has("group-no-join")) o.join_existing = false;
    if (o.static_after < 0) throw UsageError("--static-after must be >= 0");
    if (o.max_group_segments < 1) throw UsageError("--group-max must be >= 1");
  }
  if (out.empty()) throw UsageError("--grouping: none given");
  return out;
}

// Unit KV held between steps, by unit key: a unit assembled with other tokens than the held ones
// (a changed segment, a rebuilt group, a block whose content moved) is recomputed.
struct HeldUnits {
  std::map<std::string, std::vector<int64_t>> tokens;
  int64_t invalidate(const KeepHouseholdPrompt& hp) {
    int64_t recomputed = 0;
    for (const MemoryUnit& u : hp.units) {
      std::vector<int64_t>& held = tokens[u.key];
      if (held == u.tokens) continue;
      recomputed += static_cast<int64_t>(u.tokens.size());
      held = u.tokens;
    }
    return recomputed;
  }
};

// Per grouping and segment count, over every step but each episode's first (which computes
// everything under any grouping).
struct GroupingTally {
  int64_t steps = 0;
  int64_t invalidation_tokens = 0;
  double units_sum = 0;
  double unit_tokens_sum = 0;
  int64_t states = 0;  // sampled
  int64_t out_of_order = 0;
  int64_t reorder_action_agree = 0;
  double reorder_kl_sum = 0;
  double static_segments_sum = 0;   // of the whole memory (static-dynamic)
  double grouped_segments_sum = 0;  // in groups of two or more
  double groups_sum = 0;
};

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
                           uint64_t first_seed, const HouseholdGrouping& grouping,
                           const SegmentEmbedder& embed) {
  const Decoder& decoder = *model.decoder;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%8s %-20s %6s %8s %7s %7s\n", "segments", "method", "tasks", "SR", "sub-SR",
              "invalid");
  for (int64_t count : counts) {
    for (size_t m = 0; m < methods.size(); ++m) {
      LoopTally t;
      for (int64_t e = 0; e < episodes; ++e) {
        env::HouseholdSession session(episode_session_options(args, first_seed, e));
        HouseholdMemoryUnits units(grouping, embed);
        while (!session.finished()) {
          const env::EmbodiedPrompt prompt = env::build_embodied_prompt(
              session.memory(), *session.current_task(), session.task_actions());
          units.observe(*model.tokenizer, prompt);
          const KeepHouseholdPrompt hp = units.assemble(*model.tokenizer, prompt, count);
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
      rows.push_back({{"grouping", grouping.name()},
                      {"segments", count},
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

// --trace: what the trace knows of each assembled unit beyond the layout.
std::vector<TraceUnitInfo> trace_units(const Tokenizer& tokenizer, const KeepHouseholdPrompt& hp,
                                       const HouseholdGrouping& grouping,
                                       const GroupingStep& step) {
  std::map<std::string, bool> is_static;
  for (const GroupedUnit& u : step.units)
    is_static[u.key] = u.is_static;
  std::vector<TraceUnitInfo> out;
  for (size_t i = 0; i < hp.units.size(); ++i) {
    const MemoryUnit& u = hp.units[i];
    std::string group = "segment";
    if (grouping.kind == HouseholdGrouping::Kind::kStaticDynamic)
      group = is_static[u.key] ? "static" : "dynamic";
    if (grouping.kind == HouseholdGrouping::Kind::kBlocks) group = "block";
    const int64_t members = i < hp.members.size() ? static_cast<int64_t>(hp.members[i].size()) : 1;
    out.push_back({u.key, u.kind, tokenizer.decode({u.tokens.begin(), u.tokens.end()}), group,
                   std::max<int64_t>(1, members)});
  }
  return out;
}

}  // namespace

int run_eval_keep(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"episodes", "tasks", "max-steps", "segments", "methods", "every", "json",
                     "grouping", "static-after", "group-max", "group-threshold", "trace"});
  const Args args(argc, argv, 3, with_value, {"closed-loop", "group-no-join"});
  const std::vector<int64_t> counts = split_counts(args.str("segments", "10,20,30,40"));
  const std::vector<HouseholdGrouping> groupings = parse_groupings(args);
  std::vector<std::unique_ptr<RecomputePolicy>> methods;
  const std::vector<std::string> labels =
      split_names(args.str("methods", "full-recompute,prefix-cache,full-reuse,cacheblend,keep"));
  for (const std::string& spec : labels)
    methods.push_back(make_recompute_policy(spec));  // a typo fails before the model loads
  const std::string trace_path = args.str("trace", "");
  size_t traced = methods.size();  // the method whose plans --trace writes
  for (size_t m = 0; m < methods.size() && traced == methods.size(); ++m)
    if (methods[m]->name() == "keep") traced = m;
  if (!trace_path.empty() && traced == methods.size())
    throw UsageError("--trace writes the keep method's plans: add keep to --methods");
  if (!trace_path.empty() && args.has("closed-loop"))
    throw UsageError("--trace is not written with --closed-loop");
  if (!trace_path.empty() &&
      !std::filesystem::is_directory(std::filesystem::absolute(trace_path).parent_path()))
    throw UsageError("--trace: the folder of " + trace_path + " does not exist");
  RecomputeTrace trace;
  const int64_t episodes = args.integer("episodes", 4);
  const int64_t every = std::max<int64_t>(1, args.integer("every", 1));
  const auto first_seed = static_cast<uint64_t>(args.integer("seed", 1));
  LoadedModel model = load_text_model_from_args(args, "eval");
  const Decoder& decoder = *model.decoder;
  if (!model.tokenizer) throw UsageError("the model has no tokenizer");
  // The model's own pooled states (KEEP uses a sentence encoder; none can be bundled), computed
  // once per (segment, version) by HouseholdMemoryUnits.
  const SegmentEmbedder embed = [&](const std::string& text) {
    return embed_text(decoder, *model.tokenizer, text);
  };

  std::vector<UnitMemory> memories(groupings.size());
  const auto t0 = std::chrono::steady_clock::now();
  if (args.has("closed-loop")) {
    nlohmann::json out;
    out["benchmark"] = "eval-keep-closed-loop";
    out["model"] = model.name;
    out["device"] = decoder.device().str();
    out["episodes"] = episodes;
    out["first_seed"] = first_seed;
    if (groupings.size() != 1) throw UsageError("--closed-loop takes one --grouping");
    out["grouping"] = groupings[0].name();
    out["rows"] = closed_loop(model, memories[0], methods, labels, counts, args, episodes,
                              first_seed, groupings[0], embed);
    out["wall_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (args.has("json")) std::ofstream(args.str("json", "")) << out.dump(2) << '\n';
    return 0;
  }
  std::map<std::tuple<size_t, int64_t, size_t>, Tally> tallies;  // (grouping, segments, method)
  std::map<std::pair<size_t, int64_t>, GroupingTally> grouping_tallies;  // (grouping, segments)
  int64_t states = 0, mismatched_tokens = 0, step_index = 0;
  for (int64_t e = 0; e < episodes; ++e) {
    env::HouseholdSession session(episode_session_options(args, first_seed, e));
    std::vector<HouseholdMemoryUnits> units;
    for (const HouseholdGrouping& g : groupings)
      units.emplace_back(g, embed);
    std::map<std::pair<size_t, int64_t>, HeldUnits> held;
    int64_t episode_step = 0;
    while (!session.finished()) {
      const std::optional<env::Action> expert =
          env::expert_next_action(session.world(), *session.current_task());
      if (!expert) {
        session.abandon_task();
        continue;
      }
      const bool sampled = step_index++ % every == 0;
      states += sampled;
      const env::EmbodiedPrompt prompt = env::build_embodied_prompt(
          session.memory(), *session.current_task(), session.task_actions());
      const std::string expert_text = env::to_string(*expert);
      for (size_t g = 0; g < groupings.size(); ++g) {
        const GroupingStep& gs = units[g].observe(*model.tokenizer, prompt);
        for (int64_t count : counts) {
          const KeepHouseholdPrompt hp = units[g].assemble(*model.tokenizer, prompt, count);
          GroupingTally& gt = grouping_tallies[{g, count}];
          const int64_t invalidated = held[{g, count}].invalidate(hp);
          if (episode_step > 0) {
            ++gt.steps;
            gt.invalidation_tokens += invalidated;
            gt.units_sum += static_cast<double>(hp.units.size());
            for (const MemoryUnit& u : hp.units)
              gt.unit_tokens_sum += static_cast<double>(u.tokens.size());
            gt.static_segments_sum += static_cast<double>(gs.static_segments);
            for (const GroupedUnit& u : gs.units)
              if (u.members.size() > 1) {
                gt.groups_sum += 1;
                gt.grouped_segments_sum += static_cast<double>(u.members.size());
              }
          }
          if (!sampled) continue;
          ++gt.states;
          mismatched_tokens += hp.tokens_match_text ? 0 : 1;
          const AssembledPrompt assembled = memories[g].assemble(decoder, hp);
          const std::vector<int64_t> ids = assembled.tokens();

          // The reference: a plain prefill of the same ids.
          const PlainPrefill ref = plain_prefill(decoder, ids);
          const at::Tensor& ref_logits = ref.logits;
          const int64_t ref_first = greedy(ref_logits, model.tokenizer->vocab_size());
          const std::string ref_text = decode_line(model, *ref.cache, ref_logits);
          if (!hp.in_trained_order) {
            // What the placement of groups costs on its own: the trained order, all recomputed.
            ++gt.out_of_order;
            const PlainPrefill trained = plain_prefill(decoder, hp.trained_order_ids);
            gt.reorder_action_agree +=
                decode_line(model, *trained.cache, trained.logits) == ref_text;
            gt.reorder_kl_sum += kl_divergence(trained.logits, ref_logits);
          } else {
            ++gt.reorder_action_agree;
          }

          for (size_t m = 0; m < methods.size(); ++m) {
            KvCache cache(shape_of(model.config), 1, static_cast<int64_t>(ids.size()),
                          decoder.dtype(), decoder.device());
            const auto start = std::chrono::steady_clock::now();
            const SelectivePrefill r = selective_prefill(decoder, assembled, *methods[m], cache);
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count();
            if (!trace_path.empty() && m == traced && g == 0 && count == counts.front()) {
              TraceStep step = make_trace_step(r.layout, r.plan,
                                               trace_units(*model.tokenizer, hp, groupings[g], gs));
              step.step = step_index - 1;
              step.episode = e;
              step.method = methods[m]->name();
              step.spec = methods[m]->spec();
              trace.steps.push_back(std::move(step));
            }
            const std::string text = decode_line(model, cache, r.logits);
            Tally& t = tallies[{g, count, m}];
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
      ++episode_step;
      session.step(*expert);
    }
    std::fprintf(stderr, "episode %lld/%lld done (%lld states)\n", static_cast<long long>(e + 1),
                 static_cast<long long>(episodes), static_cast<long long>(states));
  }

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-15s %8s %-20s %6s %7s %7s %9s %9s %8s %8s %9s %8s %8s\n", "grouping", "segments",
              "method", "units", "tokens", "action", "1st-tok", "KL", "KL-max", "recomp", "prefill",
              "ex-share", "inval");
  for (const auto& [key, t] : tallies) {
    const auto& [g, count, m] = key;
    const double n = static_cast<double>(std::max<int64_t>(1, t.states));
    const GroupingTally& gt = grouping_tallies.at({g, count});
    const double invalidation =
        double(gt.invalidation_tokens) / double(std::max<int64_t>(1, gt.steps));
    nlohmann::json row = {
        {"grouping", groupings[g].name()},
        {"segments", count},
        {"method", labels[m]},
        {"spec", methods[m]->spec()},
        {"invalidation_tokens_per_step", invalidation},
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
    std::printf("%-15s %8lld %-20s %6.1f %7.0f %7.3f %9.3f %9.5f %8.4f %8.3f %7.1fms %8.3f %8.1f\n",
                groupings[g].name().c_str(), static_cast<long long>(count), labels[m].c_str(),
                t.units_sum / n, t.tokens_sum / n, t.action_agree / n, t.first_token_agree / n,
                t.kl_sum / n, t.kl_max, t.ratio_sum / n, t.prefill_ms_sum / n,
                row["recomputed_example_share"].get<double>(), invalidation);
    rows.push_back(row);
  }
  // Per grouping and count: the invalidation work and what the placement of groups costs.
  nlohmann::json grouping_rows = nlohmann::json::array();
  std::printf("\n%-15s %8s %6s %8s %12s %10s %10s %11s %10s %8s\n", "grouping", "segments", "steps",
              "units", "unit-tokens", "inval/step", "reordered", "order-agree", "order-KL",
              "grouped");
  for (const auto& [key, gt] : grouping_tallies) {
    const double steps = static_cast<double>(std::max<int64_t>(1, gt.steps));
    const double sampled = static_cast<double>(std::max<int64_t>(1, gt.states));
    nlohmann::json row = {{"grouping", groupings[key.first].name()},
                          {"segments", key.second},
                          {"steps", gt.steps},
                          {"units_mean", gt.units_sum / steps},
                          {"unit_tokens_mean", gt.unit_tokens_sum / steps},
                          {"invalidation_tokens_per_step", double(gt.invalidation_tokens) / steps},
                          {"static_segments_mean", gt.static_segments_sum / steps},
                          {"groups_mean", gt.groups_sum / steps},
                          {"grouped_segments_mean", gt.grouped_segments_sum / steps},
                          {"states", gt.states},
                          {"out_of_trained_order_share", double(gt.out_of_order) / sampled},
                          {"trained_order_action_agreement", gt.reorder_action_agree / sampled},
                          {"trained_order_kl_mean", gt.reorder_kl_sum / sampled}};
    std::printf("%-15s %8lld %6lld %8.1f %12.1f %10.1f %10.3f %11.3f %10.5f %8.1f\n",
                groupings[key.first].name().c_str(), static_cast<long long>(key.second),
                static_cast<long long>(gt.steps), gt.units_sum / steps, gt.unit_tokens_sum / steps,
                double(gt.invalidation_tokens) / steps, double(gt.out_of_order) / sampled,
                gt.reorder_action_agree / sampled, gt.reorder_kl_sum / sampled,
                gt.grouped_segments_sum / steps);
    grouping_rows.push_back(row);
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
  out["static_after"] = groupings[0].options.static_after;
  int64_t computed = 0, reused = 0;
  for (const UnitMemory& memory : memories) {
    computed += memory.store.computed();
    reused += memory.store.reused();
  }
  out["unit_kv_computed"] = computed;
  out["unit_kv_reused"] = reused;
  out["rows"] = rows;
  out["grouping_rows"] = grouping_rows;
  out["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "states %lld, tokenization mismatches %lld, unit KV computed %lld / reused %lld, "
      "%.0f s\n",
      static_cast<long long>(states), static_cast<long long>(mismatched_tokens),
      static_cast<long long>(computed), static_cast<long long>(reused),
      out["wall_seconds"].get<double>());
  if (args.has("json")) std::ofstream(args.str("json", "")) << out.dump(2) << '\n';
  if (!trace_path.empty()) {
    trace.model = model.name;
    write_recompute_trace(trace_path, trace);
    std::printf("recompute trace: %zu steps -> %s\n", trace.steps.size(), trace_path.c_str());
  }
  return 0;
}

}  // namespace engram::cli
