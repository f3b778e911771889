// engram-cli export conversation and eval conversation: training data from the conversation
// world, and QA accuracy (exact match and token F1 per question type) of a model over held-out
// conversations with the full KV cache, with time to first token per question.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "core/engine/generator.h"
#include "core/env/conversation_format.h"
#include "core/env/conversation_generator.h"
#include "core/env/conversation_jsonl.h"
#include "core/env/conversation_qa_metrics.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/episode_trace.h"
#include "core/policies/lexical_embedding.h"
#include "core/policies/retrieving_policy.h"
#include "core/policies/text_embedding.h"
#include "core/tokenizer/token_stream.h"

namespace engram::cli {
namespace {

using env::Conversation;
using env::ConversationConfig;

ConversationConfig conversation_config(const Args& args, uint64_t seed) {
  ConversationConfig c;
  c.seed = seed;
  c.min_tokens = args.integer("min-tokens", c.min_tokens);
  c.max_tokens = args.integer("max-tokens", c.max_tokens);
  c.questions_per_type = static_cast<int32_t>(args.integer("questions-per-type", 3));
  if (c.min_tokens < 1 || c.max_tokens < c.min_tokens)
    throw UsageError("need 1 <= --min-tokens <= --max-tokens");
  if (c.questions_per_type < 1) throw UsageError("--questions-per-type must be at least 1");
  return c;
}

// The EpiCache policy of a spec, alone or before a decode policy (`epicache+louiskv`): episodes
// are built for it either way. Null for other policies.
EpiCachePolicy* epicache_of(MemoryPolicy& policy) {
  if (auto* e = dynamic_cast<EpiCachePolicy*>(&policy)) return e;
  if (auto* r = dynamic_cast<RetrievingPolicy*>(&policy))
    return dynamic_cast<EpiCachePolicy*>(&r->prefill_policy());
  return nullptr;
}

int64_t positive(const Args& args, const std::string& name, int64_t fallback) {
  const int64_t v = args.integer(name, fallback);
  if (v < 1) throw UsageError("--" + name + " must be at least 1");
  return v;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::vector<int64_t> encode_prompt(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int64_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  for (int32_t id : tokenizer.encode(text))
    ids.push_back(id);
  return ids;
}

// Prefills `ids` into an empty working set under `policy`; returns the prefill time.
double prefill_history(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
                       const std::vector<int64_t>& ids, int64_t* peak) {
  GenerationOptions fill;
  fill.max_new_tokens = 1;  // the last token needs no forward pass: a prefill alone
  const GenerationResult r = generate(decoder, policy, ws, {}, ids, fill, {});
  *peak = std::max(*peak, r.peak_kv_tokens);
  return r.prefill_ms;
}

// One cache the questions are asked of: the history's working set under a policy (EpiCache: one
// per episode, each built with its episode's patch).
struct HistoryCache {
  std::unique_ptr<KvWorkingSet> ws;
  std::unique_ptr<MemoryPolicy> policy;
};

// The utterance lines of a window, the text that is embedded and that a medoid's patch quotes.
std::string window_text(const std::vector<env::Utterance>& u, const UtteranceWindow& w) {
  std::string text;
  for (size_t i = w.begin; i < w.end; ++i)
    text += env::utterance_line(u[i]);
  return text;
}

std::vector<int64_t> encode_patch(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int64_t> ids;
  for (int32_t id : tokenizer.encode(text))
    ids.push_back(id);
  return ids;
}

nlohmann::json score_json(const env::QaScore& s) {
  return {{"count", s.count}, {"exact_match", s.exact_match}, {"f1", s.f1}};
}

}  // namespace

int run_export_conversation(int argc, char** argv) {
  const Args args(argc, argv, 3,
                  {"conversations", "seed", "out", "min-tokens", "max-tokens", "questions-per-type",
                   "chat-per-conversation", "max-prompt-tokens", "save-conversations"},
                  {});
  const int64_t count = positive(args, "conversations", 100);
  const int64_t first = args.integer("seed", 1);
  if (first < 0) throw UsageError("--seed must not be negative");
  if (static_cast<uint64_t>(first + count) > env::kHeldOutSeedBase)
    throw UsageError("seeds " + std::to_string(first) + ".." + std::to_string(first + count - 1) +
                     " reach the held-out evaluation seeds (from " +
                     std::to_string(env::kHeldOutSeedBase) + ")");
  env::FormatOptions format;
  format.chat_examples_per_conversation =
      static_cast<int32_t>(args.integer("chat-per-conversation", 8));
  format.max_prompt_tokens = positive(args, "max-prompt-tokens", format.max_prompt_tokens);
  const std::string out_path = args.required("out");
  std::ofstream out(out_path);
  if (!out) throw std::runtime_error(out_path + ": cannot open for writing");

  std::map<std::string, int64_t> per_type;
  int64_t tokens = 0, questions = 0, records = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t seed = static_cast<uint64_t>(first + i);
    const Conversation c = env::generate_conversation(conversation_config(args, seed));
    if (args.has("save-conversations"))
      env::save_conversation(
          args.str("save-conversations", "") + "/conversation-" + std::to_string(seed), c);
    tokens += env::conversation_tokens(c);
    questions += static_cast<int64_t>(c.questions.size());
    for (const auto& examples : {env::qa_examples(c, format), env::chat_examples(c, format)}) {
      for (const env::TrainingExample& e : examples) {
        env::write_training_example(out, e);
        ++per_type[e.type];
        ++records;
      }
    }
  }
  out.flush();
  if (!out) throw std::runtime_error(out_path + ": write failed");
  std::fprintf(stderr,
               "%lld conversations (seeds %lld..%lld), %.0f estimated tokens each, "
               "%lld questions -> %lld records in %s:",
               static_cast<long long>(count), static_cast<long long>(first),
               static_cast<long long>(first + count - 1),
               static_cast<double>(tokens) / static_cast<double>(count),
               static_cast<long long>(questions), static_cast<long long>(records),
               out_path.c_str());
  for (const auto& [type, n] : per_type)
    std::fprintf(stderr, " %s %lld", type.c_str(), static_cast<long long>(n));
  std::fprintf(stderr, "\n");
  return 0;
}

int run_eval_conversation(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"episodes", "json", "min-tokens", "max-tokens", "questions-per-type",
                     "max-answer-tokens", "episodes-trace"});
  with_value.merge(policy_flags());
  const Args args(argc, argv, 3, with_value, {});
  (void)policy_choice_from_args(args, "full");  // a typo fails before the model loads
  const int64_t episodes = positive(args, "episodes", 20);
  const int64_t first = args.integer("seed", static_cast<int64_t>(env::kHeldOutSeedBase));
  if (first < 0) throw UsageError("--seed must not be negative");
  if (static_cast<uint64_t>(first) < env::kHeldOutSeedBase)
    std::fprintf(stderr, "warning: seeds below %llu are the training split\n",
                 static_cast<unsigned long long>(env::kHeldOutSeedBase));
  const int64_t max_answer = positive(args, "max-answer-tokens", 16);
  // Validate the conversation flags before the (slow) model load.
  conversation_config(args, static_cast<uint64_t>(first));

  LoadedModel model = load_text_model_from_args(args, "eval conversation");
  const Tokenizer& tokenizer = *model.tokenizer;
  const Decoder& decoder = *model.decoder;
  const ModelConfig& mc = model.config;
  constexpr int64_t kBlock = 512;
  const auto policy = policy_from_args(args, "full", model, kBlock);
  // Full KV must fit the model's positions (whole sessions leave from the front); a policy with
  // a budget takes the whole history in blocks.
  const bool bounded = policy->budget() > 0;
  int64_t peak_kv = 0, evicted_sum = 0, rebuilt_questions = 0;
  RetrievalStats retrieval;  // decode-time retrieval over every question (louiskv, Quest)
  env::QaTally tally;
  env::QaTally old_tally;  // questions whose evidence lies past the positions from the end
  std::vector<double> ttft;
  nlohmann::json details = nlohmann::json::array();
  int64_t truncated = 0, evidence_cut = 0, history_tokens_sum = 0;
  double prefill_ms_sum = 0;
  // EpiCache (epicache_policy.h): the history is clustered into episodes, one cache per episode,
  // each question routed to the nearest centroid. Routing is right when the routed episode holds
  // every evidence utterance's window.
  const EpiCachePolicy* epicache = epicache_of(*policy);
  const bool episodic = epicache && epicache->options().patch == PatchKind::kEpisode;
  int64_t episodes_sum = 0, routed_questions = 0, routed_all = 0, routed_any = 0;
  double clustering_ms_sum = 0;
  // --episodes-trace: the episodes panel's trace (episode_trace.h) of the first conversation, one
  // step per question.
  const bool trace_episodes = args.has("episodes-trace");
  if (trace_episodes && !episodic)
    throw UsageError("--episodes-trace needs --policy epicache (patch=0: episodes)");
  EpisodeTrace episode_trace;
  episode_trace.model = model.name;
  for (int64_t episode = 0; episode < episodes; ++episode) {
    const uint64_t seed = static_cast<uint64_t>(first + episode);
    const Conversation c = env::generate_conversation(conversation_config(args, seed));
    const auto& u = c.utterances;
    size_t longest_suffix = 0;
    for (const env::Question& q : c.questions)
      longest_suffix =
          std::max(longest_suffix, tokenizer.encode(env::qa_question_suffix(q.question)).size());
    // Utterances that start more than the model's positions before the history's end: no span of
    // trained positions at the end holds them (lines encoded one by one: approximate).
    size_t old_end = 0;
    int64_t from_end = 0;
    for (size_t i = u.size(); i-- > 0;) {
      from_end += static_cast<int64_t>(tokenizer.encode(env::utterance_line(u[i])).size());
      if (from_end > mc.max_positions) {
        old_end = i + 1;
        break;
      }
    }
    // Whole sessions leave from the front when the model's context cannot hold the history.
    size_t begin = 0;
    std::vector<int64_t> history = encode_prompt(tokenizer, env::qa_history_prompt(u, 0, u.size()));
    while (!bounded && static_cast<int64_t>(history.size() + longest_suffix + 2) + max_answer >
                           mc.max_positions) {
      const int32_t session = u[begin].session;
      while (begin < u.size() && u[begin].session == session)
        ++begin;
      if (begin == u.size())
        throw std::runtime_error("a single session does not fit the model's " +
                                 std::to_string(mc.max_positions) + " positions");
      history = encode_prompt(tokenizer, env::qa_history_prompt(u, begin, u.size()));
    }
    truncated += begin > 0;
    history_tokens_sum += static_cast<int64_t>(history.size());

    // The history's working set (one per episode for EpiCache), forked for every question (its
    // own copy of the policy too).
    std::vector<HistoryCache> caches;
    std::vector<UtteranceWindow> windows;
    EpisodeClustering clustering;
    std::vector<std::string> texts;  // of the windows
    std::vector<Embedding> embeddings;
    Embedding centre;                          // empty: embeddings are not centred
    std::unique_ptr<LexicalEmbedder> lexical;  // epicache:embed=1
    int64_t most_patch = 0;
    if (episodic) {
      const auto t0 = std::chrono::steady_clock::now();
      windows =
          utterance_windows(begin, u.size(), static_cast<size_t>(epicache->options().w_embed));
      for (const UtteranceWindow& w : windows)
        texts.push_back(window_text(u, w));
      if (epicache->options().lexical) lexical = std::make_unique<LexicalEmbedder>(texts);
      for (const std::string& text : texts)
        embeddings.push_back(lexical ? lexical->embed(text) : embed_text(decoder, tokenizer, text));
      if (epicache->options().centre) {
        centre = mean_embedding(embeddings);
        for (Embedding& e : embeddings)
          e = centred(e, centre);
      }
      ClusteringOptions co;
      co.episodes = static_cast<int32_t>(epicache->options().episodes);
      clustering = cluster_episodes(embeddings, co);
      clustering_ms_sum +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      episodes_sum += clustering.episodes();
      for (int64_t e = 0; e < clustering.episodes(); ++e) {
        HistoryCache cache{nullptr, policy->clone()};
        const std::string patch =
            EpiCachePolicy::episode_patch_text(window_text(u, windows[clustering.medoids[e]]));
        epicache_of(*cache.policy)->set_patch(encode_patch(tokenizer, patch));
        caches.push_back(std::move(cache));
      }
    } else {
      caches.push_back({nullptr, policy->clone()});
      if (epicache && epicache->options().patch == PatchKind::kInfiniPot) {
        epicache_of(*caches.back().policy)
            ->set_patch(encode_patch(tokenizer, EpiCachePolicy::infinipot_patch_text()));
      }
    }
    for (HistoryCache& cache : caches) {
      // A patched prompt needs its room beside the block in the fixed working set.
      const auto patch = static_cast<int64_t>(cache.policy->patch_tokens().size());
      most_patch = std::max(most_patch, patch);
      cache.ws = working_set_for(*policy, model, kBlock + patch);
      prefill_ms_sum += prefill_history(decoder, *cache.policy, *cache.ws, history, &peak_kv);
    }
    const auto ws = working_set_for(*policy, model, kBlock + most_patch);

    for (const env::Question& q : c.questions) {
      const std::vector<int64_t> prompt =
          encode_prompt(tokenizer, env::qa_history_prompt(u, begin, u.size()) +
                                       env::qa_question_suffix(q.question));
      size_t common = 0;
      while (common < history.size() && common + 1 < prompt.size() &&
             history[common] == prompt[common])
        ++common;
      // EpiCache routes the question (embedded like the windows) to the nearest centroid (Eq. 7).
      int32_t routed = 0;
      nlohmann::json routing;
      if (episodic) {
        // The question as a user's line, in the windows' own form.
        const std::string line = env::utterance_line({env::kUserSpeaker, q.question, 0, ""});
        Embedding query = lexical ? lexical->embed(line) : embed_text(decoder, tokenizer, line);
        if (!centre.empty()) query = centred(query, centre);
        routed = nearest_episode(clustering.centroids, query);
        bool all_in = !q.evidence.empty(), any_in = false;
        for (int64_t e : q.evidence) {
          const auto offset = static_cast<size_t>(e - static_cast<int64_t>(begin));
          const auto w_embed = static_cast<size_t>(epicache->options().w_embed);
          const bool in =
              e >= static_cast<int64_t>(begin) && clustering.assignment[offset / w_embed] == routed;
          all_in &= in;
          any_in |= in;
        }
        if (!q.evidence.empty()) {
          ++routed_questions;
          routed_all += all_in;
          routed_any += any_in;
        }
        routing = {{"episode", routed}, {"evidence_in_episode", all_in}};
        if (trace_episodes && episode == 0) {
          EpisodeTraceStep step = make_episode_trace_step(windows, texts, embeddings, clustering,
                                                          q.question, query, routed);
          step.turn = &q - c.questions.data();
          step.spec = policy->spec();
          step.budget = policy->budget();
          step.layers = mc.num_layers;
          for (size_t e = 0; e < step.episodes.size(); ++e) {
            step.episodes[e].cache_tokens = caches[e].ws->tokens();
            step.episodes[e].built = episode_trace.steps.empty();  // built before question 0
            step.episodes[e].layer_budgets = epicache_of(*caches[e].policy)->layer_budgets();
          }
          episode_trace.steps.push_back(std::move(step));
        }
      }
      const KvWorkingSet& base_ws = *caches[routed].ws;
      const MemoryPolicy& base_policy = *caches[routed].policy;
      ws->assign(base_ws);
      auto question_policy = base_policy.clone();
      if (!ws->truncate(static_cast<int64_t>(common))) {
        // The prompt leaves the history inside what the policy compacted: prefill it whole.
        ws->clear();
        question_policy = base_policy.clone();
        question_policy->begin_request(WorkingSetInfo{});  // no scores of the old slots
        common = 0;
        ++rebuilt_questions;
      }
      const std::vector<int64_t> cached(history.begin(),
                                        history.begin() + static_cast<std::ptrdiff_t>(common));
      GenerationOptions options;
      options.max_new_tokens = max_answer;  // greedy: temperature 0 is the default
      options.prefill_chunk = kBlock;
      const std::vector<int64_t> fresh(prompt.begin() + static_cast<std::ptrdiff_t>(common),
                                       prompt.end());
      TokenStream stream(tokenizer);
      std::string text;
      const GenerationResult r =
          generate(decoder, *question_policy, *ws, cached, fresh, options, [&](int64_t t) {
            text += stream.push(static_cast<int32_t>(t));
            return text.find('\n') == std::string::npos;
          });
      peak_kv = std::max(peak_kv, r.peak_kv_tokens);
      evicted_sum += r.evicted_tokens;
      retrieval.add(r.retrieval);
      if (r.stop_reason != "stop") text += stream.finish();
      std::string answer = text.substr(0, text.find('\n'));
      answer.erase(0, answer.find_first_not_of(" \t"));
      answer.erase(answer.find_last_not_of(" \t\r") + 1);

      tally.add(q.type, answer, q.answer);
      const bool old = !q.evidence.empty() &&
                       std::all_of(q.evidence.begin(), q.evidence.end(),
                                   [&](int64_t e) { return e < static_cast<int64_t>(old_end); });
      if (old) old_tally.add(q.type, answer, q.answer);
      ttft.push_back(r.time_to_first_token_ms);
      const bool cut = std::any_of(q.evidence.begin(), q.evidence.end(),
                                   [&](int64_t e) { return e < static_cast<int64_t>(begin); });
      evidence_cut += cut;
      details.push_back({{"seed", seed},
                         {"type", env::question_type_name(q.type)},
                         {"question", q.question},
                         {"gold", q.answer},
                         {"prediction", answer},
                         {"exact_match", env::exact_match(answer, q.answer)},
                         {"f1", env::token_f1(answer, q.answer)},
                         {"evidence_cut", cut},
                         {"evidence_past_positions", old},
                         {"prompt_tokens", prompt.size()},
                         {"time_to_first_token_ms", r.time_to_first_token_ms}});
      if (episodic) details.back()["routing"] = routing;
    }
  }

  const env::QaScore all = tally.overall();
  double ttft_mean = 0;
  for (double t : ttft)
    ttft_mean += t / static_cast<double>(ttft.size());
  nlohmann::json per_type = nlohmann::json::object();
  std::printf("%-18s %6s %8s %8s\n", "type", "count", "EM", "F1");
  for (const auto& [type, s] : tally.per_type()) {
    per_type[env::question_type_name(type)] = score_json(s);
    std::printf("%-18s %6lld %8.3f %8.3f\n", env::question_type_name(type),
                static_cast<long long>(s.count), s.exact_match, s.f1);
  }
  std::printf("%-18s %6lld %8.3f %8.3f\n", "all", static_cast<long long>(all.count),
              all.exact_match, all.f1);
  const env::QaScore old_score = old_tally.overall();
  if (old_score.count > 0) {
    std::printf("%-18s %6lld %8.3f %8.3f  (evidence more than %lld positions before the end)\n",
                "past positions", static_cast<long long>(old_score.count), old_score.exact_match,
                old_score.f1, static_cast<long long>(mc.max_positions));
  }
  std::printf("memory policy %s, KV budget %s, peak KV %lld tokens per layer\n",
              policy->spec().c_str(),
              bounded ? std::to_string(policy->budget()).c_str() : "unbounded",
              static_cast<long long>(peak_kv));
  std::printf(
      "time to first token: mean %.1f ms, p50 %.1f ms, p95 %.1f ms (history in the KV "
      "cache, question prefilled); history %.0f tokens, prefill %.1f ms per conversation; "
      "%lld of %lld conversations cut to fit %lld positions, %lld questions lost evidence\n",
      ttft_mean, percentile(ttft, 0.5), percentile(ttft, 0.95),
      static_cast<double>(history_tokens_sum) / static_cast<double>(episodes),
      prefill_ms_sum / static_cast<double>(episodes), static_cast<long long>(truncated),
      static_cast<long long>(episodes), static_cast<long long>(mc.max_positions),
      static_cast<long long>(evidence_cut));

  if (retrieval.steps > 0) {
    std::printf("retrieval: %.3f retrievals per token and layer over %lld decode steps\n",
                retrieval.retrievals_per_token(), static_cast<long long>(retrieval.steps));
  }
  if (episodic) {
    std::printf(
        "epicache: %.1f episodes per conversation (clustering %.0f ms); routed to the episode "
        "holding all the evidence %lld of %lld questions (any: %lld)\n",
        static_cast<double>(episodes_sum) / static_cast<double>(episodes),
        clustering_ms_sum / static_cast<double>(episodes), static_cast<long long>(routed_all),
        static_cast<long long>(routed_questions), static_cast<long long>(routed_any));
  }

  if (trace_episodes) {
    const std::string path = args.str("episodes-trace", "");
    write_episode_trace(path, episode_trace);
    std::fprintf(stderr, "episode trace: %zu questions of conversation %llu -> %s\n",
                 episode_trace.steps.size(), static_cast<unsigned long long>(first), path.c_str());
  }

  if (args.has("json")) {
    const nlohmann::json j = {
        {"model", model.name},
        {"policy", policy->spec()},
        {"kv_budget", policy->budget()},
        {"peak_kv_tokens", peak_kv},
        {"questions_rebuilt_from_text", rebuilt_questions},
        {"evicted_tokens", evicted_sum},
        {"retrievals_per_token", retrieval.retrievals_per_token()},
        {"device", decoder.device().str()},
        {"dtype", c10::toString(decoder.dtype())},
        {"episodes", episodes},
        {"first_seed", first},
        {"min_tokens", args.integer("min-tokens", ConversationConfig{}.min_tokens)},
        {"max_tokens", args.integer("max-tokens", ConversationConfig{}.max_tokens)},
        {"questions", all.count},
        {"exact_match", all.exact_match},
        {"f1", all.f1},
        {"per_type", per_type},
        {"time_to_first_token_ms",
         {{"mean", ttft_mean},
          {"p50", percentile(ttft, 0.5)},
          {"p95", percentile(ttft, 0.95)},
          {"max", ttft.empty() ? 0.0 : *std::max_element(ttft.begin(), ttft.end())}}},
        {"history_tokens_mean",
         static_cast<double>(history_tokens_sum) / static_cast<double>(episodes)},
        {"history_prefill_ms_mean", prefill_ms_sum / static_cast<double>(episodes)},
        {"conversations_cut_to_fit", truncated},
        {"questions_with_evidence_cut", evidence_cut},
        {"evidence_past_positions", score_json(old_score)},
        {"epicache",
         episodic ? nlohmann::json{{"episodes_mean", static_cast<double>(episodes_sum) /
                                                         static_cast<double>(episodes)},
                                   {"clustering_ms_mean",
                                    clustering_ms_sum / static_cast<double>(episodes)},
                                   {"questions_with_evidence", routed_questions},
                                   {"routed_to_all_evidence", routed_all},
                                   {"routed_to_any_evidence", routed_any},
                                   {"routing_accuracy",
                                    routed_questions > 0 ? static_cast<double>(routed_all) /
                                                               static_cast<double>(routed_questions)
                                                         : 0.0}}
                  : nlohmann::json()},
        {"answers", details}};
    const std::string path = args.str("json", "");
    std::ofstream out(path);
    out << j.dump(2) << '\n';
    if (!out) throw std::runtime_error(path + ": write failed");
  }
  return 0;
}

}  // namespace engram::cli
