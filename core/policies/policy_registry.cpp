#include "core/policies/policy_registry.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/policies/epicache_policy.h"
#include "core/policies/full_policy.h"
#include "core/policies/h2o_policy.h"
#include "core/policies/louiskv_policy.h"
#include "core/policies/page_retrieval_policy.h"
#include "core/policies/retrieving_policy.h"
#include "core/policies/snapkv_policy.h"
#include "core/policies/streaming_policy.h"

namespace engram {
namespace {

// "name:a=1,b=2" -> name and {a: 1, b: 2}.
std::map<std::string, int64_t> parse_options(const std::string& spec, std::string& name) {
  const size_t colon = spec.find(':');
  name = spec.substr(0, colon);
  std::map<std::string, int64_t> out;
  if (colon == std::string::npos) return out;
  std::string rest = spec.substr(colon + 1);
  size_t at = 0;
  while (at <= rest.size()) {
    const size_t comma = rest.find(',', at);
    const std::string item = rest.substr(at, comma == std::string::npos ? comma : comma - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("policy '" + spec + "': expected key=value, got '" + item + "'");
    try {
      size_t used = 0;
      const int64_t v = std::stoll(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1 || v < 0) throw std::invalid_argument(item);
      out[item.substr(0, eq)] = v;
    } catch (const std::exception&) {
      throw std::invalid_argument("policy '" + spec + "': '" + item +
                                  "' needs a non-negative integer");
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// "name:a=1,key=4,5,6,b=2" -> "name:a=1,b=2" and {4, 5, 6} in `list`: a list option's values are
// the items after `key=` up to the next key=value item.
std::string take_list(const std::string& spec, const std::string& key, std::vector<int64_t>& list) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  std::string kept = spec.substr(0, colon + 1);
  bool in_list = false, first = true;
  size_t at = colon + 1;
  while (at <= spec.size()) {
    const size_t comma = spec.find(',', at);
    const std::string item = spec.substr(at, comma == std::string::npos ? comma : comma - at);
    std::string value;
    if (item.rfind(key + "=", 0) == 0) {
      in_list = true;
      value = item.substr(key.size() + 1);
    } else if (in_list && item.find('=') == std::string::npos) {
      value = item;
    } else {
      in_list = false;
      kept += (first ? "" : ",") + item;
      first = false;
    }
    if (in_list) {
      size_t used = 0;
      int64_t v = -1;
      try {
        v = std::stoll(value, &used);
      } catch (const std::exception&) {
      }
      if (v < 0 || used != value.size() || value.empty())
        throw std::invalid_argument("policy '" + spec + "': " + key + "= takes integers >= 0 " +
                                    "separated by commas, got '" + value + "'");
      list.push_back(v);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (first) kept.pop_back();  // only the list: no options left after the colon
  return kept;
}

int64_t take(std::map<std::string, int64_t>& options, const std::string& key, int64_t fallback) {
  const auto it = options.find(key);
  if (it == options.end()) return fallback;
  const int64_t v = it->second;
  options.erase(it);
  return v;
}

bool is_retrieval(const std::string& name) {
  return name == "louiskv" || name == "pageretrieval";
}

// `louiskv:...` / `pageretrieval:...`: the decode half of a spec.
std::unique_ptr<RetrievalPolicy> make_retrieval(const std::string& spec, const std::string& name,
                                                std::map<std::string, int64_t>& options) {
  RetrievalSettings s;
  s.sinks = take(options, "sinks", s.sinks);
  s.window = std::max<int64_t>(1, take(options, "window", s.window));
  s.budget = std::max<int64_t>(1, take(options, "budget", s.budget));
  s.full_layers = take(options, "full_layers", s.full_layers);
  s.prompt_by_decode = take(options, "prompt", 0) != 0;
  s.offload = std::clamp<int64_t>(take(options, "offload", -1), -1, 1);
  s.overlap_prefill = take(options, "overlap", 1) != 0;
  s.index_on_host = take(options, "host_index", 0) != 0;
  if (name == "pageretrieval") {
    const int64_t page = std::max<int64_t>(1, take(options, "page", 16));
    if (page > s.window)
      throw std::invalid_argument("policy '" + spec + "': the window must hold a page");
    return std::make_unique<PageRetrievalPolicy>(page, s);
  }
  LouisKvOptions o;
  // Without `tau=`, each request gets the paper's τ for its shape (long input 0.85, else 0.7).
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  const int64_t tau = take(options, "tau", kUnset);
  if (tau != kUnset && (tau < 0 || tau > 100))
    throw std::invalid_argument("policy '" + spec + "': tau is a percent, 0..100");
  o.tau_by_shape = tau == kUnset;
  if (!o.tau_by_shape) o.tau = static_cast<double>(tau) / 100.0;
  o.cluster_tokens = std::max<int64_t>(1, take(options, "cluster", o.cluster_tokens));
  o.iterations = take(options, "iterations", o.iterations);
  o.stride = take(options, "stride", 0);
  o.min_segment_tokens = std::max<int64_t>(1, take(options, "segment", o.min_segment_tokens));
  o.moved_permille = std::clamp<int64_t>(take(options, "moved", o.moved_permille), 0, 1000);
  o.rate_percent = take(options, "rate", 0);
  if (o.rate_percent < 0 || o.rate_percent >= 100)
    throw std::invalid_argument("policy '" + spec +
                                "': rate is a percent of the tokens, 1..99 (0: one τ)");
  if (o.rate_percent > 0 && o.stride > 0)
    throw std::invalid_argument("policy '" + spec + "': rate= or stride=, not both");
  return std::make_unique<LouisKvPolicy>(o, s);
}

void reject_leftovers(const std::string& spec, const std::map<std::string, int64_t>& options) {
  if (!options.empty()) {
    throw std::invalid_argument("policy '" + spec + "': unknown option '" + options.begin()->first +
                                "'");
  }
}

}  // namespace

const std::vector<PolicyDescription>& policy_catalog() {
  static const std::vector<PolicyDescription> catalog = {
      {"full", "every token stays in attention; stops at the model's positions", false},
      {"streaming", "StreamingLLM: attention sinks + the most recent tokens", true},
      {"snapkv", "SnapKV: each head keeps the keys the last 64 tokens attend to most", true},
      {"epicache",
       "EpiCache: the conversation clustered into episodes; each turn answered from its episode's "
       "cache",
       true},
      {"louiskv",
       "LouisKV: every token kept; decoding retrieves key clusters at semantic boundaries", false},
  };
  return catalog;
}

const char* default_policy_spec() {
  // The best measured on long conversations (bench/results/2026-11-24-cpu-epicache: exact match
  // above streaming and snapkv at every budget); it equals full KV while a chat fits its budget.
  return "epicache";
}

std::unique_ptr<MemoryPolicy> make_policy(const std::string& spec) {
  // PREFILL+DECODE: a prefill policy, then decode-time retrieval over what it kept.
  const size_t plus = spec.find('+');
  if (plus != std::string::npos) {
    const std::string decode_spec = spec.substr(plus + 1);
    std::string decode_name;
    auto decode_options = parse_options(decode_spec, decode_name);
    if (!is_retrieval(decode_name)) {
      throw std::invalid_argument("policy '" + spec +
                                  "': after '+' comes a decode policy "
                                  "(louiskv, pageretrieval), not '" +
                                  decode_name + "'");
    }
    auto decode = make_retrieval(decode_spec, decode_name, decode_options);
    reject_leftovers(decode_spec, decode_options);
    auto prefill = make_policy(spec.substr(0, plus));
    if (prefill->decode_retrieval())
      throw std::invalid_argument("policy '" + spec + "': one decode policy at a time");
    return std::make_unique<RetrievingPolicy>(std::move(prefill), std::move(decode));
  }
  std::string name;
  std::vector<int64_t> layer_budgets;  // epicache's layers=M_0,M_1,...
  auto options = parse_options(take_list(spec, "layers", layer_budgets), name);
  if (!layer_budgets.empty() && name != "epicache")
    throw std::invalid_argument("policy '" + spec + "': unknown option 'layers'");
  std::unique_ptr<MemoryPolicy> policy;
  if (name == "full") {
    policy = std::make_unique<FullPolicy>();
  } else if (name == "streaming") {
    policy = std::make_unique<StreamingPolicy>(take(options, "sinks", 4));
  } else if (name == "snapkv") {
    const int64_t window = take(options, "window", 64);
    policy = std::make_unique<SnapKvPolicy>(std::max<int64_t>(1, window),
                                            std::max<int64_t>(1, take(options, "kernel", 7)));
  } else if (name == "h2o") {
    const int64_t recent = take(options, "recent", 50);
    if (recent > 100) throw std::invalid_argument("policy '" + spec + "': recent is a percent");
    policy = std::make_unique<H2oPolicy>(recent);
  } else if (is_retrieval(name)) {
    auto decode = make_retrieval(spec, name, options);
    policy = std::make_unique<RetrievingPolicy>(std::make_unique<FullPolicy>(), std::move(decode));
  } else if (name == "epicache") {
    // The episode variant's episodes are built by the caller: ChatSession (chat-time routing,
    // core/policies/episode_router.h) or `eval conversation`.
    EpiCacheOptions o;
    o.episodes = std::max<int64_t>(1, take(options, "episodes", o.episodes));
    o.w_embed = std::max<int64_t>(1, take(options, "w_embed", o.w_embed));
    const int64_t patch = take(options, "patch", static_cast<int64_t>(o.patch));
    if (patch > 2)
      throw std::invalid_argument("policy '" + spec +
                                  "': patch is 0 (episode), 1 (infinipot) or 2 (snapkv)");
    o.patch = static_cast<PatchKind>(patch);
    o.window = std::max<int64_t>(1, take(options, "window", o.window));
    o.tail = take(options, "tail", o.tail);
    o.per_head = take(options, "per_head", 1);
    if (o.per_head > 2)
      throw std::invalid_argument("policy '" + spec +
                                  "': per_head is 0 (per layer), 1 (per KV head) or 2 (joint)");
    o.centre = take(options, "centre", 1) != 0;
    o.lexical = take(options, "embed", 0) != 0;
    o.tau_percent = take(options, "tau", o.tau_percent);
    o.max_episodes = std::max<int64_t>(1, take(options, "max_episodes", o.max_episodes));
    o.rebuild_tokens = std::max<int64_t>(0, take(options, "rebuild", o.rebuild_tokens));
    o.calibrated = take(options, "calibrated", 0) != 0;
    auto epicache = std::make_unique<EpiCachePolicy>(o);
    epicache->set_layer_budgets(std::move(layer_budgets));
    policy = std::move(epicache);
  } else {
    std::string names;
    for (const auto& d : policy_catalog())
      names += (names.empty() ? "" : ", ") + d.name;
    names += ", h2o, pageretrieval, PREFILL+louiskv";
    throw std::invalid_argument("unknown memory policy '" + name + "'; known: " + names);
  }
  reject_leftovers(spec, options);
  return policy;
}

int64_t session_prefill_block(int64_t max_positions, bool on_gpu) {
  return std::min<int64_t>(on_gpu ? 2048 : 512, max_positions / 4);
}

int64_t effective_budget(const MemoryPolicy& policy, int64_t requested, int64_t max_positions,
                         int64_t block, std::string* note) {
  if (requested < 0) throw std::invalid_argument("the KV budget must not be negative");
  if (policy.keeps_every_token()) {
    if (requested > 0) {
      throw std::invalid_argument(
          "policy 'full' keeps every token; a KV budget needs a policy that evicts (streaming, "
          "snapkv)");
    }
    return 0;
  }
  const int64_t most = max_positions - block;
  if (most < 16) {
    throw std::invalid_argument("the model's " + std::to_string(max_positions) +
                                " positions leave no room for a budget beside a prefill block of " +
                                std::to_string(block));
  }
  if (requested == 0) return most;
  if (requested > most) {
    if (note) {
      *note = "KV budget lowered from " + std::to_string(requested) + " to " +
              std::to_string(most) + " tokens: a prefill block of " + std::to_string(block) +
              " must fit the model's " + std::to_string(max_positions) + " positions beside it";
    }
    return most;
  }
  return requested;
}

std::unique_ptr<MemoryPolicy> make_policy(const std::string& spec, int64_t requested_budget,
                                          int64_t max_positions, int64_t block, std::string* note) {
  auto policy = make_policy(spec);
  policy->set_budget(effective_budget(*policy, requested_budget, max_positions, block, note));
  return policy;
}

}  // namespace engram
