// engram-cli bench epicache: EpiCache's efficiency analysis (Kim et al., 2025, §4.3, Table 3) on
// Engram's chat path. A long history (conversation-world utterances, N rendered tokens) is
// followed by T user turns (held-out conversations), answered three ways:
//  - epicache: ChatSession under `epicache` with budget M; the first turn embeds the windows and
//    clusters them, each turn is routed, an episode's cache is built by block prefill the first
//    time a turn is routed to it, the routed cache is swapped into the working set (the others
//    wait in host memory, written back) and caught up with what was said since;
//  - prefix: ChatSession with full KV (prefix caching): the history is prefilled once, then every
//    turn prefills only itself and decodes over the whole KV;
//  - full: Full KV re-prefill: every turn prefills the whole conversation so far from an empty
//    cache. Only the first K turns run; the total is projected (mean x T) and labelled so.
// Every timing has the device synchronised; peak memory is reset before each method. `--sweep`
// adds the peak memory of building one episode cache vs a full prefill per history length.
// Replies are greedy, at most D tokens: EOS does not stop them, the chat template's stop string
// does (a trained model says when it is done; random weights practically never do, so on a
// shape every reply is D tokens). Prints and writes JSON; never asserts a time (style rule 10).
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/torch_profile.h"
#include "core/engine/chat_session.h"
#include "core/env/conversation_generator.h"
#include "core/log.h"
#include "gpu/device_info.h"

#if TORCH_VERSION_MAJOR < 2
#include <c10/core/CPUAllocator.h>
#endif

namespace engram::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

#if TORCH_VERSION_MAJOR < 2
// Host tensors have no allocator statistics: this wrapper of the CPU allocator counts the bytes
// of live tensors and their peak. Installed before the model loads, so the weights count, as
// they do in a GPU's allocated bytes. (libtorch 1.13's Allocator interface; 2.x changed it, and
// a 2.x build reports no host peak.)
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static CountingCpuAllocator& install() {
    static CountingCpuAllocator* self = [] {
      auto* a = new CountingCpuAllocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(a, /*priority=*/100);
      return a;
    }();
    return *self;
  }
  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr d = base_->allocate(n);
    // Only what the base hands out as a plain pointer (context == data) is wrapped.
    if (!d.get() || d.get() != d.get_context()) return d;
    const c10::DeleterFnPtr deleter = d.get_deleter();
    const c10::Device device = d.device();
    void* p = d.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_[p] = {static_cast<int64_t>(n), deleter};
      current_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, current_);
    }
    return {p, p, &CountingCpuAllocator::release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::release; }
  int64_t current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  int64_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

 private:
  struct Live {
    int64_t bytes;
    c10::DeleterFnPtr deleter;
  };
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}
  static void release(void* p) {
    CountingCpuAllocator& self = install();
    c10::DeleterFnPtr deleter = nullptr;
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      const auto it = self.live_.find(p);
      if (it == self.live_.end()) return;  // not ours (cannot happen: only ours point here)
      self.current_ -= it->second.bytes;
      deleter = it->second.deleter;
      self.live_.erase(it);
    }
    if (deleter) deleter(p);
  }
  c10::Allocator* base_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, Live> live_;
  mutable int64_t current_ = 0;
  mutable int64_t peak_ = 0;
};
#endif

// Peak memory of the compute device since reset(): the CUDA caching allocator's allocated bytes
// on a GPU, the counted host tensors on the CPU (where the episodes waiting in host memory are
// the same memory, so they count too). -1 where neither is available.
class PeakMemory {
 public:
  explicit PeakMemory(at::Device device) : device_(device) {
#if TORCH_VERSION_MAJOR < 2
    if (!device.is_cuda()) (void)CountingCpuAllocator::install();
#endif
  }
  std::string scope() const {
    if (device_.is_cuda()) return "CUDA caching allocator, allocated bytes (weights included)";
#if TORCH_VERSION_MAJOR < 2
    return "host tensors allocated through the CPU allocator (weights included)";
#else
    return "not measured (host tensor counting needs libtorch 1.x)";
#endif
  }
  void reset() {
    gpu::synchronize(device_);
    start_ = current();
    gpu::reset_peak_allocated(device_);
#if TORCH_VERSION_MAJOR < 2
    if (!device_.is_cuda()) CountingCpuAllocator::install().reset_peak();
#endif
  }
  // {"peak_bytes", "above_start_bytes"}: the peak since reset() and what it added to the bytes
  // live at reset() (the loaded weights).
  json report() const {
    gpu::synchronize(device_);
    const int64_t p = peak();
    return {{"peak_bytes", p}, {"above_start_bytes", p < 0 ? -1 : p - start_}};
  }

 private:
  int64_t current() const {
    return allocated(/*peak=*/false);
  }
  int64_t peak() const {
    return allocated(/*peak=*/true);
  }
  // Bytes allocated now or at the peak since the last reset; -1 where nothing counts them.
  int64_t allocated(bool peak) const {
    if (device_.is_cuda())
      return peak ? gpu::peak_allocated_bytes(device_) : gpu::allocated_bytes(device_);
#if TORCH_VERSION_MAJOR < 2
    if (!device_.is_cuda()) {
      const auto& counter = CountingCpuAllocator::install();
      return peak ? counter.peak() : counter.current();
    }
#endif
    (void)peak;
    return -1;
  }
  at::Device device_;
  int64_t start_ = 0;
};

int64_t token_count(const LoadedModel& model, const std::string& text) {
  return static_cast<int64_t>(model.tokenizer->encode(text).size());
}

int64_t rendered_tokens(const LoadedModel& model, const std::vector<ChatMessage>& messages) {
  return static_cast<int64_t>(
      model.chat_template->encode(*model.tokenizer, messages, /*add_generation_prompt=*/false)
          .size());
}

// Tokens the chat template adds around one message (beyond its content).
int64_t message_overhead(const LoadedModel& model) {
  const std::vector<ChatMessage> probe{{"user", "a b"}, {"assistant", "c d"}};
  const int64_t content = token_count(model, "a b") + token_count(model, "c d");
  return std::max<int64_t>(1, (rendered_tokens(model, probe) - content + 1) / 2);
}

// The history: utterances of conversation-world conversations (seeds 1, 2, ...), as chat
// messages, until the rendered history reaches `target` tokens; it ends after an assistant
// reply. Counted per message, checked by rendering whenever the count says it is there.
std::vector<ChatMessage> world_history(const LoadedModel& model, int64_t target) {
  const int64_t overhead = message_overhead(model);
  std::vector<ChatMessage> messages;
  int64_t tokens = 0;
  for (uint64_t seed = 1;; ++seed) {
    env::ConversationConfig config;
    config.seed = seed;
    config.min_tokens = std::max<int64_t>(2000, target - tokens);
    config.max_tokens = config.min_tokens + 1000;
    for (const env::Utterance& u : env::generate_conversation(config).utterances) {
      const bool user = u.speaker == env::kUserSpeaker;
      if (messages.empty() && !user) continue;
      messages.push_back({user ? "user" : "assistant", u.text});
      tokens += token_count(model, u.text) + overhead;
      if (tokens >= target && !user) {
        tokens = rendered_tokens(model, messages);
        if (tokens >= target) return messages;
      }
    }
  }
}

// One stage of Table 3: total time and how many times it ran.
struct Stage {
  double ms = 0;
  int64_t count = 0;
  void add(double t) {
    ms += t;
    ++count;
  }
  json to_json() const { return {{"ms", ms}, {"count", count}}; }
};

struct TurnTiming {
  double wall_ms = 0;
  ChatReply reply;
};

// One reply, timed with the device synchronised before and after.
TurnTiming timed_reply(ChatSession& session, const std::string& turn,
                       const GenerationOptions& options) {
  const at::Device device = session.model().decoder->device();
  gpu::synchronize(device);
  const auto t0 = Clock::now();
  TurnTiming t;
  t.reply = session.reply(turn, options, {});
  gpu::synchronize(device);
  t.wall_ms = ms_since(t0);
  return t;
}

double other_ms(const TurnTiming& t) {
  const auto& g = t.reply.generation;
  return std::max(0.0, t.wall_ms - t.reply.route.embed_ms - t.reply.route.cluster_ms -
                           g.prefill_ms - g.decode_ms);
}

// Turns [first, last) of the epicache run traced (--profile PATH --profile-turns A-B), or the
// preparation steps [first, last) before the first turn (--profile-steps A-B, epicache-prepared).
struct TurnProfile {
  std::string path;
  int64_t first = -1, last = -1;
  bool steps = false;
};

// The slowest turns a person waits for: the largest and the 95th percentile.
json wait_json(std::vector<double> turn_ms) {
  std::sort(turn_ms.begin(), turn_ms.end());
  if (turn_ms.empty()) return {{"max_ms", 0}, {"p95_ms", 0}};
  return {{"max_ms", turn_ms.back()},
          {"p95_ms", turn_ms[std::min(turn_ms.size() - 1, turn_ms.size() * 95 / 100)]}};
}

// `prepare`: between turns the waiting episodes are brought up to the conversation as the app
// does while nobody waits (ChatSession::prepare_waiting_episode), timed apart from the turns.
json run_epicache(LoadedModel& model, const std::vector<ChatMessage>& history,
                  const std::vector<std::string>& turns, const PolicyChoice& choice,
                  const GenerationOptions& options, PeakMemory& memory, const TurnProfile& profile,
                  bool prepare) {
  memory.reset();
  ChatSession session(model, {}, choice);
  if (!session.episodes())
    throw std::runtime_error("policy " + choice.spec + " keeps no episodes under this budget");
  session.set_history(history);
  Stage embed_windows, cluster, build, match, retrieval, turn_prefill, decode, other;
  std::vector<double> turn_ms;
  std::vector<int64_t> turn_prefilled;  // tokens each turn prefilled (catch-up + the turn)
  std::vector<int32_t> routed;
  std::unique_ptr<TorchProfile> tracing;
  std::map<int32_t, int64_t> per_episode;
  int64_t created = 0, reclustered = 0, decoded = 0, peak_kv = 0, prepare_steps = 0;
  double total = 0, between_turns = 0;
  int32_t active = -1;
  const at::Device device = model.decoder->device();
  // The waiting work, timed apart from the turns; before the first turn it indexes and clusters
  // the history and builds every episode, as the app does after a long conversation is opened.
  // Where its host time goes (ChatSession::last_prepare_timing, summed), and how long the device
  // ran on after the host had enqueued the last step (`device_tail_ms`): a host-paced
  // preparation has its steps' host time close to its wall time.
  struct PrepareHost {
    ChatSession::PrepareTiming sum;
    double steps_ms = 0, device_tail_ms = 0;
    json to_json() const {
      return {{"render_ms", sum.render_ms}, {"refresh_ms", sum.refresh_ms},
              {"switch_ms", sum.switch_ms}, {"prefill_enqueue_ms", sum.prefill_ms},
              {"index_ms", sum.index_ms},   {"settle_ms", sum.settle_ms},
              {"steps_host_ms", steps_ms},  {"device_tail_ms", device_tail_ms}};
    }
  };
  const auto prepare_waiting = [&](int64_t& steps, PrepareHost& host, bool traced) {
    gpu::synchronize(device);
    const auto t0 = Clock::now();
    while (true) {
      if (traced && steps == profile.first) tracing = std::make_unique<TorchProfile>(profile.path);
      if (traced && steps == profile.last) tracing.reset();
      const auto s0 = Clock::now();
      const auto step = session.prepare_waiting_episode();
      host.steps_ms += ms_since(s0);
      const ChatSession::PrepareTiming& t = session.last_prepare_timing();
      host.sum.render_ms += t.render_ms;
      host.sum.refresh_ms += t.refresh_ms;
      host.sum.switch_ms += t.switch_ms;
      host.sum.prefill_ms += t.prefill_ms;
      host.sum.index_ms += t.index_ms;
      host.sum.settle_ms += t.settle_ms;
      if (!step) break;
      ++steps;
      if (step->episode >= 0) active = step->episode;
    }
    const auto s0 = Clock::now();
    gpu::synchronize(device);
    host.device_tail_ms += ms_since(s0);
    if (traced) tracing.reset();
    return ms_since(t0);
  };
  int64_t first_steps = 0;
  PrepareHost first_host, between_host;
  const bool trace_steps = profile.steps && !profile.path.empty();
  const double before_first = prepare ? prepare_waiting(first_steps, first_host, trace_steps) : 0.0;
  for (const std::string& turn : turns) {
    const auto index = static_cast<int64_t>(turn_ms.size());
    const bool trace_turns = !profile.steps && !profile.path.empty();
    if (trace_turns && index == profile.first)
      tracing = std::make_unique<TorchProfile>(profile.path);
    const TurnTiming t = timed_reply(session, turn, options);
    if (trace_turns && index + 1 == profile.last) tracing.reset();
    const ChatReply& r = t.reply;
    const EpisodeRoute& route = r.route;
    total += t.wall_ms;
    turn_ms.push_back(t.wall_ms);
    turn_prefilled.push_back(r.generation.prompt_tokens);
    routed.push_back(route.episode);
    decoded += static_cast<int64_t>(r.generation.tokens.size());
    peak_kv = std::max(peak_kv, r.generation.peak_kv_tokens);
    decode.add(r.generation.decode_ms);
    if (route.clustered)
      embed_windows.add(route.embed_ms);
    else
      match.add(route.embed_ms);
    if (route.cluster_ms > 0 || route.clustered) cluster.add(route.cluster_ms);
    created += route.created ? 1 : 0;
    reclustered += route.reclustered ? 1 : 0;
    // A turn whose routed cache started empty prefilled the whole history under the budget: a
    // build (or a rebuild). A turn that moved to another built episode swapped caches
    // (retrieval and write-back) and caught that cache up within its prefill.
    const bool built = route.episode >= 0 && r.reused_tokens == 0;
    const bool switched = route.episode >= 0 && route.episode != active && !built;
    (built ? build : turn_prefill).add(r.generation.prefill_ms);
    (switched ? retrieval : other).add(other_ms(t));
    if (route.episode >= 0) {
      ++per_episode[route.episode];
      active = route.episode;
    }
    if (prepare) between_turns += prepare_waiting(prepare_steps, between_host, false);
    std::fprintf(stderr, "\repicache turn %zu/%zu", turn_ms.size(), turns.size());
  }
  std::fprintf(stderr, "\n");
  json per_episode_json = json::object();
  for (const auto& [e, n] : per_episode)
    per_episode_json[std::to_string(e)] = n;
  json out = {{"total_ms", total},
              {"per_turn_ms_mean", total / std::max<size_t>(1, turns.size())},
              {"stages",
               {{"embed_windows", embed_windows.to_json()},
                {"cluster", cluster.to_json()},
                {"build_prefill", build.to_json()},
                {"match", match.to_json()},
                {"retrieval_writeback", retrieval.to_json()},
                {"turn_prefill", turn_prefill.to_json()},
                {"decode", decode.to_json()},
                {"other", other.to_json()}}},
              {"episodes", session.episodes()->episodes().size()},
              {"episodes_created", created},
              {"reclustered_turns", reclustered},
              {"turns_per_episode", per_episode_json},
              {"routed_episode_per_turn", routed},
              {"turn_ms", turn_ms},
              {"turn_wait", wait_json(turn_ms)},
              {"turn_prefilled_tokens", turn_prefilled},
              {"decoded_tokens", decoded},
              {"decode_ms_per_token", decode.ms / std::max<int64_t>(1, decoded - decode.count)},
              {"peak_kv_tokens", peak_kv},
              {"kv_budget", session.policy().budget()},
              {"memory", memory.report()}};
  if (prepare) {
    out["between_turns"] = {
        {"ms", between_turns},
        {"steps", prepare_steps},
        {"ms_per_step", between_turns / static_cast<double>(std::max<int64_t>(1, prepare_steps))},
        {"before_first_turn_ms", before_first},
        {"before_first_turn_steps", first_steps},
        {"host", between_host.to_json()},
        {"before_first_turn_host", first_host.to_json()},
        {"device_total_ms", total + between_turns + before_first},
        {"note",
         "waiting episodes brought up to the conversation between turns, a block a step, as the "
         "app does while nobody waits; before the first turn the history is indexed, clustered "
         "and every episode built (as after a long conversation is opened); total_ms is what "
         "the person waits for (the turns)"}};
  }
  out["stage_notes"] =
      "embed_windows: the first routed turn's embedding of every window (and its query); match: "
      "later turns' query (and new windows) embedding; build_prefill: prefill of turns whose "
      "routed cache started empty (block prefill of the history under the budget, with the "
      "turn); retrieval_writeback: the rest of a turn that moved to another built episode "
      "(cache copies in and out; its catch-up prefill is in turn_prefill); other: the rest of "
      "the other turns (rendering the conversation, routing bookkeeping)";
  return out;
}

json run_prefix(LoadedModel& model, const std::vector<ChatMessage>& history,
                const std::vector<std::string>& turns, const GenerationOptions& options,
                PeakMemory& memory) {
  memory.reset();
  ChatSession session(model, {}, PolicyChoice{"full", 0});
  session.set_history(history);
  const at::Device device = model.decoder->device();
  gpu::synchronize(device);
  const auto t0 = Clock::now();
  const int64_t prefilled = session.prefill_history();
  gpu::synchronize(device);
  const double history_ms = ms_since(t0);
  Stage prefill, decode, other;
  std::vector<double> turn_ms;
  double turns_total = 0;
  int64_t decoded = 0;
  for (const std::string& turn : turns) {
    const TurnTiming t = timed_reply(session, turn, options);
    turns_total += t.wall_ms;
    turn_ms.push_back(t.wall_ms);
    prefill.add(t.reply.generation.prefill_ms);
    decode.add(t.reply.generation.decode_ms);
    other.add(other_ms(t));
    decoded += static_cast<int64_t>(t.reply.generation.tokens.size());
    std::fprintf(stderr, "\rprefix turn %zu/%zu", turn_ms.size(), turns.size());
  }
  std::fprintf(stderr, "\n");
  return {{"history_prefill_ms", history_ms},
          {"history_prefill_tokens", prefilled},
          {"turns_ms", turns_total},
          {"total_ms", history_ms + turns_total},
          {"per_turn_ms_mean", turns_total / std::max<size_t>(1, turns.size())},
          {"stages",
           {{"history_prefill", Stage{history_ms, 1}.to_json()},
            {"turn_prefill", prefill.to_json()},
            {"decode", decode.to_json()},
            {"other", other.to_json()}}},
          {"turn_ms", turn_ms},
          {"turn_wait", wait_json(turn_ms)},
          {"decoded_tokens", decoded},
          {"decode_ms_per_token", decode.ms / std::max<int64_t>(1, decoded - decode.count)},
          {"final_stream_tokens", session.cached_tokens()},
          {"memory", memory.report()}};
}

json run_full(LoadedModel& model, const std::vector<ChatMessage>& history,
              const std::vector<std::string>& turns, int64_t measured,
              const GenerationOptions& options, PeakMemory& memory) {
  memory.reset();
  std::vector<ChatMessage> conversation = history;
  Stage prefill, decode;
  std::vector<double> turn_ms;
  std::vector<int64_t> prompt_tokens;
  for (int64_t k = 0; k < measured; ++k) {
    ChatSession session(model, {}, PolicyChoice{"full", 0});  // an empty cache every turn
    session.set_history(conversation);
    const TurnTiming t = timed_reply(session, turns[static_cast<size_t>(k)], options);
    turn_ms.push_back(t.wall_ms);
    prefill.add(t.reply.generation.prefill_ms);
    decode.add(t.reply.generation.decode_ms);
    prompt_tokens.push_back(t.reply.generation.prompt_tokens);
    conversation = session.history();
    std::fprintf(stderr, "\rfull re-prefill turn %lld/%lld", static_cast<long long>(k + 1),
                 static_cast<long long>(measured));
  }
  std::fprintf(stderr, "\n");
  double sum = 0;
  for (double t : turn_ms)
    sum += t;
  const double mean = sum / std::max<size_t>(1, turn_ms.size());
  return {{"measured_turns", measured},
          {"per_turn_ms_mean", mean},
          {"turn_ms", turn_ms},
          {"prompt_tokens", prompt_tokens},
          {"stages", {{"prefill", prefill.to_json()}, {"decode", decode.to_json()}}},
          {"projected_total_ms", mean * static_cast<double>(turns.size())},
          {"projection", "projected: mean of the first " + std::to_string(measured) + " turns x " +
                             std::to_string(turns.size()) +
                             " turns (later turns are longer, so this underestimates)"},
          {"memory", memory.report()}};
}

// One history length: building one episode cache (the first routed turn: embed, cluster, block
// prefill under the budget, one token) vs a full prefill of the same history, fresh sessions.
json sweep_row(LoadedModel& model, int64_t tokens, const std::string& turn,
               const PolicyChoice& epicache, PeakMemory& memory) {
  const std::vector<ChatMessage> history = world_history(model, tokens);
  GenerationOptions one;
  one.max_new_tokens = 1;
  one.stop_at_eos = false;
  json row = {{"history_tokens_target", tokens},
              {"history_tokens", rendered_tokens(model, history)}};
  {
    memory.reset();
    ChatSession session(model, {}, epicache);
    session.set_history(history);
    const TurnTiming t = timed_reply(session, turn, one);
    row["episode_build"] = {{"total_ms", t.wall_ms},
                            {"embed_ms", t.reply.route.embed_ms},
                            {"cluster_ms", t.reply.route.cluster_ms},
                            {"build_prefill_ms", t.reply.generation.prefill_ms},
                            {"peak_kv_tokens", t.reply.generation.peak_kv_tokens},
                            {"memory", memory.report()}};
  }
  {
    memory.reset();
    ChatSession session(model, {}, PolicyChoice{"full", 0});
    session.set_history(history);
    const at::Device device = model.decoder->device();
    gpu::synchronize(device);
    const auto t0 = Clock::now();
    const int64_t n = session.prefill_history();
    gpu::synchronize(device);
    row["full_prefill"] = {
        {"prefill_ms", ms_since(t0)}, {"prefilled_tokens", n}, {"memory", memory.report()}};
  }
  const auto peak = [&](const char* k) { return row[k]["memory"]["peak_bytes"].get<int64_t>(); };
  if (peak("episode_build") > 0)
    row["peak_ratio_full_over_episode"] =
        static_cast<double>(peak("full_prefill")) / static_cast<double>(peak("episode_build"));
  std::fprintf(stderr, "sweep %lld tokens: episode build %.0f ms, full prefill %.0f ms\n",
               static_cast<long long>(row["history_tokens"].get<int64_t>()),
               row["episode_build"]["total_ms"].get<double>(),
               row["full_prefill"]["prefill_ms"].get<double>());
  return row;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double ratio(const json& a, const json& b) {
  const double d = b.get<double>();
  return d > 0 ? a.get<double>() / d : 0.0;
}

}  // namespace

int run_bench_epicache(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"tokenizer", "history-tokens", "turns", "kv-budget", "decode-tokens",
                     "full-turns", "sweep", "methods", "policy", "json", "profile", "profile-turns",
                     "profile-steps"});
  const Args args(argc, argv, 2, with_value, {});
  if (args.positional() != std::vector<std::string>{"epicache"})
    throw UsageError("bench epicache takes no other positional arguments");
  require_model_or_shape(args, "bench epicache");
  const bool use_shape = args.has("shape");
  const int64_t turn_count = args.integer("turns", 300);
  const int64_t budget = args.integer("kv-budget", 8192);
  const int64_t decode_tokens = args.integer("decode-tokens", 32);
  const int64_t full_turns = std::min(args.integer("full-turns", 3), turn_count);
  if (turn_count < 1 || budget < 16 || decode_tokens < 1 || full_turns < 1)
    throw UsageError("--turns, --full-turns, --decode-tokens must be >= 1 and --kv-budget >= 16");
  const std::vector<std::string> methods = split_list(args.str("methods", "epicache,prefix,full"));
  for (const std::string& m : methods)
    if (m != "epicache" && m != "epicache-prepared" && m != "prefix" && m != "full")
      throw UsageError("--methods takes epicache, epicache-prepared, prefix and full, not '" + m +
                       "'");
  std::vector<int64_t> sweep;
  if (args.has("sweep")) {
    try {
      sweep = parse_ids(args.str("sweep", ""));  // a comma list of integers
    } catch (const UsageError&) {
      throw UsageError("--sweep takes token counts, e.g. 10000,25000,50000");
    }
  }
  const PolicyChoice epicache{args.str("policy", "epicache"), budget};
  // --profile PATH --profile-turns A-B: a Kineto trace of the epicache run's turns A..B-1;
  // --profile-steps A-B instead: of epicache-prepared's preparation steps A..B-1 before the
  // first turn (the episodes' builds).
  TurnProfile profile;
  profile.path = args.str("profile", "");
  if (!profile.path.empty()) {
    profile.steps = args.has("profile-steps");
    const std::string flag = profile.steps ? "--profile-steps" : "--profile-turns";
    const std::string range =
        profile.steps ? args.str("profile-steps", "") : args.str("profile-turns", "10-13");
    const size_t dash = range.find('-');
    if (dash == std::string::npos) throw UsageError(flag + ": A-B, e.g. 10-13");
    profile.first = std::stoll(range.substr(0, dash));
    profile.last = std::stoll(range.substr(dash + 1));
    if (profile.first < 0 || profile.last <= profile.first)
      throw UsageError(flag + ": A-B with 0 <= A < B");
  }
  (void)policy_choice_from_args(args, "epicache");  // a typo fails before the model loads

  if (args.has("log-level")) log::set_level(log::parse_level(args.str("log-level", "warn")));
  const DeviceChoice device = choose_device(args.str("device", "auto"), args.str("dtype", "auto"));
  PeakMemory memory(device.device);  // before the weights load, so they count on the CPU too
  LoadedModel model = load_model_or_shape(args, "bench epicache", device);

  // Held-out conversations: another split than the history's.
  const std::vector<std::string> turns =
      env::user_turns(env::kHeldOutSeedBase, static_cast<size_t>(turn_count));
  // Room the turns take in a full-KV stream: each turn, its reply of D tokens, their templates.
  const int64_t overhead = message_overhead(model);
  int64_t turn_room = 0;
  for (const std::string& t : turns)
    turn_room += token_count(model, t) + decode_tokens + 2 * overhead;
  const int64_t positions = model.config.max_positions;
  const int64_t history_target =
      args.integer("history-tokens", use_shape ? 90000 : positions - turn_room - 64);
  const bool needs_full_kv = std::find_if(methods.begin(), methods.end(), [](const std::string& m) {
                               return m.rfind("epicache", 0) != 0;
                             }) != methods.end();
  if (history_target < 64) throw UsageError("--history-tokens must be at least 64");
  if (needs_full_kv && history_target + turn_room > positions) {
    throw UsageError("a history of " + std::to_string(history_target) + " tokens and " +
                     std::to_string(turn_count) + " turns (~" + std::to_string(turn_room) +
                     " tokens with their replies) exceed the model's " + std::to_string(positions) +
                     " positions for full KV; lower --history-tokens, --turns or --decode-tokens");
  }
  for (int64_t n : sweep)
    if (n < 64 || n + 64 > positions)
      throw UsageError("--sweep lengths must be in [64, positions - 64]");

  const std::vector<ChatMessage> history = world_history(model, history_target);
  const int64_t history_tokens = rendered_tokens(model, history);
  std::fprintf(stderr, "history: %zu utterances, %lld tokens; %zu turns\n", history.size(),
               static_cast<long long>(history_tokens), turns.size());

  GenerationOptions options;
  options.max_new_tokens = decode_tokens;
  options.stop_at_eos = false;  // D tokens unless the template's stop string comes
  {
    // Warm-up (kernels, allocator, the recorded decode step), not measured.
    ChatSession warm(model, {}, PolicyChoice{"full", 0});
    warm.set_history({history.begin(), history.begin() + std::min<size_t>(4, history.size())});
    (void)timed_reply(warm, turns.front(), options);
  }

  const gpu::DeviceInfo info = gpu::device_info(model.decoder->device());
  json out;
  out["benchmark"] = "engram-epicache";
  out["model"] = model.name;
  if (use_shape) {
    out["shape"] = args.str("shape", "");
    out["shape_note"] = "random weights of the named shape; text tokenized with " +
                        args.str("tokenizer", "") +
                        "; timings depend on the token counts, not on the ids";
  } else {
    out["model_dir"] = args.str("model", "");
  }
  out["model_fingerprint"] = model.fingerprint;
  out["device"] = info.name;
  out["torch"] = info.torch_version;
  out["dtype"] = c10::toString(model.decoder->dtype());
  out["max_positions"] = positions;
  out["history_utterances"] = history.size();
  out["history_tokens"] = history_tokens;
  out["turns"] = turn_count;
  out["kv_budget"] = budget;
  out["epicache_policy"] = epicache.spec;
  out["decode_tokens"] = decode_tokens;
  out["memory_scope"] = memory.scope();
  out["timing_scope"] =
      "per turn: from the user's message to the last of D greedy tokens, device synchronised, "
      "model loaded and warmed up; greedy replies of at most D tokens (EOS ignored; the "
      "template's stop string ends one, which random weights practically never produce): "
      "compare decode_ms_per_token where decoded_tokens differ";
  json results = json::object();
  for (const std::string& m : methods) {
    std::fprintf(stderr, "%s ...\n", m.c_str());
    if (m == "epicache" || m == "epicache-prepared")
      results[m] = run_epicache(model, history, turns, epicache, options, memory, profile,
                                m == "epicache-prepared");
    if (m == "prefix") results[m] = run_prefix(model, history, turns, options, memory);
    if (m == "full") results[m] = run_full(model, history, turns, full_turns, options, memory);
  }
  out["methods"] = results;
  json ratios = json::object();
  if (results.contains("epicache")) {
    const json& e = results["epicache"];
    if (results.contains("full")) {
      ratios["latency_full_projected_over_epicache"] =
          ratio(results["full"]["projected_total_ms"], e["total_ms"]);
      ratios["peak_memory_full_over_epicache"] =
          ratio(results["full"]["memory"]["peak_bytes"], e["memory"]["peak_bytes"]);
    }
    if (results.contains("prefix")) {
      ratios["latency_prefix_over_epicache"] = ratio(results["prefix"]["total_ms"], e["total_ms"]);
      ratios["decode_prefix_over_epicache"] =
          ratio(results["prefix"]["stages"]["decode"]["ms"], e["stages"]["decode"]["ms"]);
      ratios["peak_memory_prefix_over_epicache"] =
          ratio(results["prefix"]["memory"]["peak_bytes"], e["memory"]["peak_bytes"]);
    }
  }
  if (results.contains("epicache-prepared") && results.contains("prefix")) {
    const json& e = results["epicache-prepared"];
    ratios["latency_prefix_over_epicache_prepared"] =
        ratio(results["prefix"]["total_ms"], e["total_ms"]);
    ratios["device_time_prefix_over_epicache_prepared"] =
        ratio(results["prefix"]["total_ms"], e["between_turns"]["device_total_ms"]);
  }
  out["ratios"] = ratios;
  json rows = json::array();
  for (int64_t n : sweep)
    rows.push_back(sweep_row(model, n, turns.front(), epicache, memory));
  if (!sweep.empty()) out["sweep"] = rows;
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
