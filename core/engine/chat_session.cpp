#include "core/engine/chat_session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/model/model_error.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/episode_trace.h"
#include "core/policies/lexical_embedding.h"
#include "core/policies/policy_registry.h"
#include "core/policies/text_embedding.h"
#include "core/tokenizer/stop_strings.h"
#include "core/tokenizer/token_stream.h"
#include "gpu/device_timeline.h"

namespace engram {
ChatSession::ChatSession(LoadedModel& model, std::string system_prompt, PolicyChoice choice)
    : model_(model), choice_(std::move(choice)) {
  if (!model.tokenizer || !model.chat_template) {
    throw ModelError(model.name,
                     "chat needs tokenizer.model or tokenizer.json in the model folder");
  }
  if (!system_prompt.empty()) messages_.push_back({"system", std::move(system_prompt)});
  const ModelConfig& c = model.config;
  block_ = session_prefill_block(c.max_positions, model.decoder->device().is_cuda());
  const int64_t block = block_;
  policy_ = make_policy(choice_.spec, choice_.kv_budget, c.max_positions, block, &policy_note_);
  if (auto* epi = dynamic_cast<EpiCachePolicy*>(policy_.get())) {
    const std::string note =
        apply_layer_calibration(*epi, model.layer_calibration, c.max_positions - block);
    if (!note.empty()) policy_note_ += (policy_note_.empty() ? "" : "; ") + note;
  }
  const int64_t capacity = policy_->budget() > 0 ? policy_->budget() + block : 0;
  ws_ = std::make_unique<KvWorkingSet>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim},
                                       capacity, model.decoder->dtype(), model.decoder->device(),
                                       c.max_positions);
  // Episodic caches for the episode variant of epicache under a budget (the others score with
  // one patch or none and keep one cache).
  const auto* epi = dynamic_cast<const EpiCachePolicy*>(policy_.get());
  if (epi && epi->options().patch == PatchKind::kEpisode && policy_->budget() > 0) {
    const EpiCacheOptions& o = epi->options();
    EpisodeRouterOptions ro;
    ro.episodes = static_cast<int32_t>(o.episodes);
    ro.w_embed = static_cast<size_t>(o.w_embed);
    ro.tau = static_cast<double>(o.tau_percent) / 100.0;
    ro.max_episodes = static_cast<int32_t>(o.max_episodes);
    ro.centre = o.centre;
    lexical_embedding_ = o.lexical;
    ro.rebuild_tokens = o.rebuild_tokens > 0 ? o.rebuild_tokens : policy_->budget() + block;
    router_ = std::make_unique<EpisodeRouter>(ro);
    base_policy_ = policy_->clone();
  }
}

void ChatSession::set_history(std::vector<ChatMessage> messages) {
  messages_ = std::move(messages);
  render_memo_.clear();
  rendered_ = false;
}

void ChatSession::keep_for_store(bool keep) {
  // Episodic caches take turns in the working set, so no single stream of KV runs describes
  // them: once clustered the store keeps the episodes and each episode's cache as units of the
  // pool (episode_kv_store.h). Before (the conversation fits the budget) the one cache is stored
  // as for any policy.
  ws_->set_capture(keep && !(router_ && router_->clustered()));
}

void ChatSession::adopt_working_set(const KvCache& cache, const at::Tensor& slot_stream,
                                    std::vector<int64_t> stream_ids, int64_t stored_from) {
  if (cache.lengths()[0] > 0 && stream_ids.empty())
    throw std::invalid_argument("ChatSession::adopt_working_set: KV without token ids");
  ws_->adopt(cache, slot_stream, static_cast<int64_t>(stream_ids.size()));
  ws_->capture_from(std::min<int64_t>(stored_from, static_cast<int64_t>(stream_ids.size())));
  cached_ids_ = std::move(stream_ids);
}

void ChatSession::adopt_cache(std::unique_ptr<KvCache> cache, std::vector<int64_t> cached_ids) {
  if (!cache) throw std::invalid_argument("ChatSession::adopt_cache: no cache");
  if (cache->lengths()[0] != static_cast<int64_t>(cached_ids.size())) {
    throw std::invalid_argument("ChatSession::adopt_cache: a cache of " +
                                std::to_string(cache->lengths()[0]) + " tokens for " +
                                std::to_string(cached_ids.size()) + " token ids");
  }
  if (policy_->budget() == 0 &&
      static_cast<int64_t>(cached_ids.size()) + 1 > model_.config.max_positions) {
    throw std::invalid_argument("ChatSession::adopt_cache: " + std::to_string(cached_ids.size()) +
                                " tokens exceed the model's " +
                                std::to_string(model_.config.max_positions) + " positions");
  }
  const int64_t n = cache->lengths()[0];
  adopt_working_set(*cache, at::arange(n, at::kLong).view({1, 1, n}), std::move(cached_ids), n);
}

size_t ChatSession::sync_prefix(const std::vector<int64_t>& ids, size_t keep_last, bool* rebuilt) {
  size_t common = 0;
  while (common < cached_ids_.size() && common < ids.size() && cached_ids_[common] == ids[common])
    ++common;
  if (common + keep_last > ids.size()) common = ids.size() - keep_last;
  if (!ws_->truncate(static_cast<int64_t>(common))) {
    // The cut falls inside KV the policy compacted: start again from the text.
    ws_->clear();
    common = 0;
    if (rebuilt) *rebuilt = true;
  }
  cached_ids_.resize(common);
  return common;
}

int64_t ChatSession::prefill_history(int64_t chunk, const PrefillControl& control) {
  if (messages_.empty()) return 0;
  // Episodes are built between turns or when a turn is routed to them (the first reply builds
  // what it needs).
  if (router_ && router_->clustered()) return 0;
  const std::vector<int64_t>& ids = rendered_history();
  // Past the budget the conversation is clustered before its next turn, which drops the single
  // cache: filling it would be wasted (minutes at a 20K history on a CPU).
  if (router_ && static_cast<int64_t>(ids.size()) > policy_->budget()) return 0;
  if (policy_->budget() == 0 &&
      static_cast<int64_t>(ids.size()) + 1 > model_.config.max_positions) {
    throw std::out_of_range("the history has " + std::to_string(ids.size()) +
                            " tokens; the model's maximum is " +
                            std::to_string(model_.config.max_positions) + " positions");
  }
  const size_t common = sync_prefix(ids, 0, nullptr);
  const std::vector<int64_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
  if (fresh.empty()) return 0;
  gpu::DeviceTimeline timeline(ws_->cache().device());
  (void)prefill(*model_.decoder, *policy_, *ws_, fresh, chunk > 0 ? chunk : block_, timeline,
                nullptr, -1, {}, control);
  keep_fed_prefix(ids);
  return ws_->stream_tokens() - static_cast<int64_t>(common);
}

void ChatSession::keep_fed_prefix(const std::vector<int64_t>& ids) {
  const auto fed = static_cast<size_t>(ws_->stream_tokens());
  cached_ids_.assign(ids.begin(),
                     ids.begin() + static_cast<std::ptrdiff_t>(std::min(fed, ids.size())));
}

ChatReply ChatSession::reply(const std::string& user_text, const GenerationOptions& options,
                             const std::function<void(const std::string&)>& on_text,
                             const TurnProgressFn& on_progress) {
  messages_.push_back({"user", user_text});
  try {
    return generate_reply(options, on_text, on_progress);
  } catch (...) {
    messages_.pop_back();  // a failed turn leaves the history as it was
    throw;
  }
}

ChatReply ChatSession::regenerate(const GenerationOptions& options,
                                  const std::function<void(const std::string&)>& on_text,
                                  const TurnProgressFn& on_progress) {
  if (messages_.empty() || messages_.back().role != "assistant") {
    throw std::logic_error("regenerate: the last message is not a reply");
  }
  ChatMessage dropped = messages_.back();
  messages_.pop_back();
  try {
    return generate_reply(options, on_text, on_progress);
  } catch (...) {
    messages_.push_back(std::move(dropped));
    throw;
  }
}

std::vector<int64_t> ChatSession::episode_patch(const std::string& patch_source) const {
  // The patch is forwarded beside a prefill block in the fixed working set: a long window is
  // cut (at a character count, re-encoded) to a quarter of a block.
  const int64_t most = block_ / 4;
  std::string source = patch_source;
  std::vector<int64_t> ids;
  for (int attempt = 0; attempt < 8; ++attempt) {
    ids.clear();
    for (int32_t id : model_.tokenizer->encode(EpiCachePolicy::episode_patch_text(source)))
      ids.push_back(id);
    if (static_cast<int64_t>(ids.size()) <= most || source.empty()) break;
    source.resize(source.size() * static_cast<size_t>(most) / ids.size() * 9 / 10);
  }
  return ids;
}

std::unique_ptr<MemoryPolicy> ChatSession::episode_policy(const std::string& patch_source) const {
  auto policy = base_policy_->clone();
  static_cast<EpiCachePolicy&>(*policy).set_patch(episode_patch(patch_source));
  return policy;
}

void ChatSession::set_episode_patch(int32_t episode, const std::string& patch_source) {
  MemoryPolicy& target = episode == active_episode_ ? *policy_ : *episode_caches_[episode].policy;
  static_cast<EpiCachePolicy&>(target).set_patch(episode_patch(patch_source));
}

void ChatSession::episode_kv_ahead() {
  if (episode_kv_ || episode_kv_ahead_.valid()) return;
  // Page-locking the pool's slab (4.8 GB on the 3B shape) held the host ~0.7 s at the first
  // switch while the GPU waited: started when the episodes start, it is ready by the end of the
  // first build. What it reads is copied here; the engine thread goes on.
  const KvCache& c = ws_->cache();
  EpisodeKvPoolOptions options = episode_kv_options_;
  if (options.pinned_episodes <= 0) options.pinned_episodes = router_->options().episodes;
  episode_kv_ahead_for_ = c.capacity();
  episode_kv_ahead_ =
      std::async(std::launch::async, [shape = c.shape(), dtype = c.dtype(), device = c.device(),
                                      capacity = c.capacity(), options] {
        return std::make_unique<EpisodeKvPool>(shape, dtype, device, capacity, options);
      });
}

EpisodeKvPool& ChatSession::episode_kv() {
  if (!episode_kv_) {
    // One sized for another working set is dropped (its destruction waits for it).
    if (episode_kv_ahead_for_ != ws_->cache().capacity()) episode_kv_ahead_ = {};
    episode_kv_ahead();  // none under way: made now
    // A failure to pin is thrown here, where it was thrown when the pool was made here.
    episode_kv_ = episode_kv_ahead_.get();
  }
  return *episode_kv_;
}

void ChatSession::set_episode_kv_options(EpisodeKvPoolOptions options) {
  episode_kv_ahead_ = {};  // made with the options before (its destruction waits for it)
  episode_kv_options_ = std::move(options);
}

EpisodeKvPool* ChatSession::checkpoint_episode_kv() {
  if (!router_ || !router_->clustered()) return nullptr;
  if (active_episode_ >= 0) {
    if (cached_ids_.empty()) {
      if (episode_kv_) episode_kv_->drop(active_episode_);
    } else {
      episode_kv().checkpoint(active_episode_, *ws_);
    }
  }
  return episode_kv_ && !episode_kv_->episodes().empty() ? episode_kv_.get() : nullptr;
}

const std::vector<int64_t>& ChatSession::episode_ids(int32_t episode) const {
  if (episode == active_episode_) return cached_ids_;
  return episode_caches_.at(static_cast<size_t>(episode)).ids;
}

const std::vector<at::Tensor>& ChatSession::episode_scores(int32_t episode) const {
  const MemoryPolicy& p = episode == active_episode_
                              ? *policy_
                              : *episode_caches_.at(static_cast<size_t>(episode)).policy;
  return static_cast<const EpiCachePolicy&>(p).scores();
}

void ChatSession::count_fed(int32_t episode, int64_t before, int64_t after, int64_t conversation,
                            int64_t own_from) {
  if (before == 0) {  // a build (or rebuild) from the text starts
    ++episode_builds_;
    build_ends_[episode] = conversation;
  }
  if (const auto it = build_ends_.find(episode); it != build_ends_.end()) {
    router_->built(episode);  // still the build: history it started from, not new text
    if (after >= it->second) build_ends_.erase(it);
    return;
  }
  // Only the episode's own turns count towards its rebuild: the other turns its stream catches
  // up on are compressed under its patch (the paper's episodes never take them at all).
  router_->fed(episode, std::max<int64_t>(0, after - std::max(before, own_from)));
}

void ChatSession::start_episodes() {
  if (active_episode_ >= 0) policy_ = base_policy_->clone();
  ws_->set_capture(false);
  build_ends_.clear();
  episode_caches_.clear();
  if (episode_kv_) episode_kv_->clear();
  active_episode_ = -1;
  episode_kv_ahead();
}

void ChatSession::add_unbuilt_episodes(size_t known) {
  const std::vector<ChatEpisode>& episodes = router_->episodes();
  while (episode_caches_.size() < known)
    episode_caches_.push_back({episode_policy(episodes[episode_caches_.size()].patch_source), {}});
}

void ChatSession::drop_episode_caches() {
  build_ends_.clear();
  episode_caches_.clear();
  if (episode_kv_) episode_kv_->clear();
  active_episode_ = -1;
  policy_ = base_policy_->clone();
  ws_->clear();
  cached_ids_.clear();
}

std::vector<std::string> ChatSession::adopt_episode_kv(std::vector<RestoredEpisodeKv> restored) {
  if (!router_ || !router_->clustered())
    throw std::logic_error("ChatSession::adopt_episode_kv: no episodes to adopt caches for");
  const std::vector<ChatEpisode>& episodes = router_->episodes();
  drop_episode_caches();
  for (const ChatEpisode& e : episodes)
    episode_caches_.push_back({episode_policy(e.patch_source), {}});
  std::vector<std::string> refused;
  for (RestoredEpisodeKv& r : restored) {
    refused.emplace_back();
    try {
      if (r.episode < 0 || static_cast<size_t>(r.episode) >= episodes.size())
        throw std::invalid_argument("the conversation has no episode " + std::to_string(r.episode));
      if (r.layout.tokens > ws_->cache().capacity() ||
          static_cast<int64_t>(r.ids.size()) != r.layout.stream_end) {
        throw std::invalid_argument(std::to_string(r.layout.tokens) + " slots of " +
                                    std::to_string(r.ids.size()) + " stream ids do not fit a " +
                                    "working set of " + std::to_string(ws_->cache().capacity()) +
                                    " slots");
      }
      episode_kv().adopt(r.episode, r.units, r.layout);
    } catch (const std::exception& e) {  // invalid_argument, or the pool's runtime_error
      refused.back() = e.what();
      continue;
    }
    EpisodeCache& cache = episode_caches_[static_cast<size_t>(r.episode)];
    cache.ids = std::move(r.ids);
    for (at::Tensor& t : r.scores)
      if (t.defined()) t = t.to(ws_->cache().device());
    static_cast<EpiCachePolicy&>(*cache.policy).set_scores(std::move(r.scores));
    router_->built(r.episode);
    router_->fed(r.episode, r.fed_since_build);
  }
  return refused;
}

void ChatSession::switch_episode(int32_t episode) {
  if (episode == active_episode_) return;
  if (active_episode_ >= 0) {  // write back the active episode's cache
    EpisodeCache& out = episode_caches_[active_episode_];
    if (cached_ids_.empty()) {
      episode_kv().drop(active_episode_);
    } else {
      episode_kv().write_back(active_episode_, *ws_);
    }
    out.ids = cached_ids_;
    out.policy = std::move(policy_);
  }
  EpisodeCache& in = episode_caches_[episode];
  policy_ = std::move(in.policy);
  if (episode_kv().load(episode, *ws_)) {
    cached_ids_ = in.ids;
  } else {
    cached_ids_.clear();
  }
  active_episode_ = episode;
}

std::vector<std::string> ChatSession::utterance_lines(size_t messages) const {
  std::vector<std::string> lines;
  for (size_t i = 0; i < messages; ++i) {
    if (messages_[i].role != "system")
      lines.push_back(EpisodeRouter::utterance_line(messages_[i].role, messages_[i].content));
  }
  return lines;
}

std::string ChatSession::embedding_model() const {
  return lexical_embedding_ ? kLexicalEmbeddingModel : model_.fingerprint;
}

TextsEmbedder ChatSession::embedder(const TurnProgressFn& on_progress) const {
  if (lexical_embedding_) {
    // Log-TF of hashed stems without IDF: a chat's windows grow and come back from the store, so
    // no corpus stays fixed (`eval conversation` weighs by IDF over its windows); the router's
    // centring on the mean window lowers the stems every window shares, as IDF would. No forward:
    // microseconds a window.
    return [](const std::vector<std::string>& texts) {
      static const LexicalEmbedder stems({});
      std::vector<Embedding> out;
      out.reserve(texts.size());
      for (const std::string& t : texts)
        out.push_back(stems.embed(t));
      return out;
    };
  }
  return [this, on_progress](const std::vector<std::string>& texts) {
    const auto total = static_cast<int64_t>(texts.size());
    return embed_texts(*model_.decoder, *model_.tokenizer, texts, [&](int64_t done) {
      if (on_progress) on_progress({TurnProgress::Stage::kIndexing, -1, 0, done, total});
    });
  };
}

const std::vector<int64_t>& ChatSession::rendered_history() {
  const auto same = [](const ChatMessage& a, const ChatMessage& b) {
    return a.role == b.role && a.content == b.content;
  };
  if (!rendered_ || !std::equal(messages_.begin(), messages_.end(), rendered_messages_.begin(),
                                rendered_messages_.end(), same)) {
    const std::vector<int32_t> rendered = model_.chat_template->encode(
        *model_.tokenizer, messages_, /*add_generation_prompt=*/false, render_memo_);
    rendered_ids_.assign(rendered.begin(), rendered.end());
    rendered_messages_ = messages_;
    rendered_ = true;
  }
  return rendered_ids_;
}

std::optional<TurnProgress> ChatSession::prepare_waiting_episode() {
  prepare_timing_ = {};
  if (!router_ || messages_.empty() || messages_.back().role != "assistant") return std::nullopt;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  const auto lap = [&t0](double& into) {
    const auto now = Clock::now();
    into += std::chrono::duration<double, std::milli>(now - t0).count();
    t0 = now;
  };
  if (!router_->clustered()) {
    auto out = cluster_ahead();
    lap(prepare_timing_.index_ms);
    return out;
  }
  add_unbuilt_episodes(router_->episodes().size());  // restored without their caches
  // An episode fed past its limit is re-clustered and rebuilt now, not by the turn routed there
  // (the utterance lines are gathered only then: this runs once a block).
  if (const int32_t due = router_->rebuild_due(); due >= 0) {
    const EpisodeRoute refreshed =
        router_->refresh(due, utterance_lines(messages_.size()), embedder({}));
    if (refreshed.rebuild) {
      for (int32_t e : refreshed.patch_changed)
        set_episode_patch(e, router_->episodes()[static_cast<size_t>(e)].patch_source);
      switch_episode(due);
      ws_->clear();
      cached_ids_.clear();
    }
    lap(prepare_timing_.refresh_ms);
  }
  const std::vector<int64_t>& ids = rendered_history();
  const auto fed_of = [&](const std::vector<int64_t>& have) {
    const auto n = std::min(have.size(), ids.size());
    return static_cast<int64_t>(std::mismatch(have.begin(), have.begin() + n, ids.begin()).first -
                                have.begin());
  };
  // The active episode first while it is a block behind (a build under way): each switch writes
  // one working set back and loads another, and alternating episodes switched at every block.
  int32_t pick = -1;
  int64_t most_behind = 0;
  const int64_t active_fed = active_episode_ >= 0 ? fed_of(cached_ids_) : 0;
  const bool active_behind =
      active_episode_ >= 0 && static_cast<int64_t>(ids.size()) - active_fed >= block_;
  if (active_behind) pick = active_episode_;
  for (size_t e = 0; e < episode_caches_.size() && !active_behind; ++e) {
    const auto episode = static_cast<int32_t>(e);
    const std::vector<int64_t>& have =
        episode == active_episode_ ? cached_ids_ : episode_caches_[e].ids;
    if (have.empty()) {  // not built: the first turn routed there would build it
      pick = episode;
      break;
    }
    const int64_t behind = static_cast<int64_t>(ids.size()) - fed_of(have);
    if (behind >= block_ && behind > most_behind) {
      pick = episode;
      most_behind = behind;
    }
  }
  lap(prepare_timing_.render_ms);
  const bool synced = active_episode_ >= 0 &&
                      active_fed == static_cast<int64_t>(cached_ids_.size()) &&
                      cached_ids_.size() == ids.size();
  if (pick < 0 && active_episode_ >= 0 && !synced && active_fed >= ws_->exact_stream()) {
    // The active episode's stream brought to the conversation as the next turn renders it: a
    // reply's fed ids need not be its text's re-tokenization, and the turn would cut back and
    // feed them again while the person waits (after a shrink, below, that cut would fall in
    // compacted KV and rebuild the episode from the text).
    pick = active_episode_;
  }
  if (pick < 0) {
    if (!synced) return std::nullopt;
    auto settled = settle_active(static_cast<int64_t>(ids.size()));
    lap(prepare_timing_.settle_ms);
    return settled;
  }
  switch_episode(pick);
  const size_t common = sync_prefix(ids, 0, nullptr);
  lap(prepare_timing_.switch_ms);
  // What one forward takes (the block less the patch): a whole block a step was two forwards and
  // two evictions (~150 ms a step on the H100 against ~95 per block inside a turn's build).
  const size_t len =
      std::min(static_cast<size_t>(prefill_room(*policy_, *ws_, block_)), ids.size() - common);
  const std::vector<int64_t> block(ids.begin() + static_cast<std::ptrdiff_t>(common),
                                   ids.begin() + static_cast<std::ptrdiff_t>(common + len));
  if (!block.empty()) {  // empty: the stream only had ids past the conversation to drop
    gpu::DeviceTimeline timeline(ws_->cache().device());
    // Evicting only when full, as a turn's catch-up does (GenerationOptions::evict_when_full).
    (void)prefill(*model_.decoder, *policy_, *ws_, block, block_, timeline, nullptr,
                  /*reserve_when_full=*/0);
  }
  lap(prepare_timing_.prefill_ms);
  keep_fed_prefix(ids);
  count_fed(pick, static_cast<int64_t>(common), ws_->stream_tokens(),
            static_cast<int64_t>(ids.size()), /*own_from=*/static_cast<int64_t>(ids.size()));
  return preparing_step(static_cast<int64_t>(ids.size()));
}

TurnProgress ChatSession::preparing_step(int64_t conversation_tokens) const {
  TurnProgress out;
  out.stage = TurnProgress::Stage::kPreparing;
  out.episode = active_episode_;
  out.episodes = static_cast<int32_t>(router_->episodes().size());
  out.done = static_cast<int64_t>(cached_ids_.size());
  out.total = conversation_tokens;
  return out;
}

std::optional<TurnProgress> ChatSession::settle_active(int64_t conversation_tokens) {
  if (active_episode_ < 0) return std::nullopt;
  // Past its budget by half a block: shrunk to the budget now (scored with its patch, as a full
  // working set is before a block), so that its next turn, its own or a catch-up after the
  // others' turns, appends instead of forwarding the patch and re-planning every slot while the
  // person waits. The paper's episode caches hold M between turns.
  const bool shrink = ws_->tokens() > policy_->budget() + block_ / 2;
  // Written to the pool when a plan moved its slots (that shrink, or an eviction in its turn):
  // the switch away from it would write the whole working set (~1.2 GB on the 3B shape, ~25 ms
  // on the H100) while a turn waits. Written now, that switch appends only what later turns add.
  if (!shrink && episode_kv().unwritten(active_episode_, *ws_) <= block_) return std::nullopt;
  if (shrink) {
    gpu::DeviceTimeline timeline(ws_->cache().device());
    evict_to_budget(*model_.decoder, *policy_, *ws_, timeline, nullptr);
  }
  episode_kv().checkpoint(active_episode_, *ws_);
  return preparing_step(conversation_tokens);
}

std::optional<TurnProgress> ChatSession::cluster_ahead() {
  // Within the budget one cache is exact; the first turn past it clusters (route_turn).
  if (static_cast<int64_t>(rendered_history().size()) <= policy_->budget()) return std::nullopt;
  // About a block's worth of text embedded a step (~4 characters a token).
  const EpisodeRouter::Indexed indexed = router_->index(
      utterance_lines(messages_.size()), embedder({}), static_cast<size_t>(block_) * 4);
  TurnProgress out;
  out.stage = TurnProgress::Stage::kIndexing;
  out.done = static_cast<int64_t>(indexed.done);
  out.total = static_cast<int64_t>(indexed.total);
  if (indexed.done < indexed.total) return out;
  if (!router_->cluster_now().clustered) return std::nullopt;
  start_episodes();
  add_unbuilt_episodes(router_->episodes().size());
  out.episodes = static_cast<int32_t>(router_->episodes().size());
  return out;
}

EpisodeRoute ChatSession::route_turn(int64_t prompt_tokens, const TurnProgressFn& on_progress) {
  if (messages_.empty() || messages_.back().role != "user") return {};
  const std::string query = EpisodeRouter::utterance_line("user", messages_.back().content);
  EpisodeRoute route = router_->route(utterance_lines(messages_.size() - 1), query,
                                      prompt_tokens > policy_->budget(), embedder(on_progress));
  if (route.episode < 0) {
    // The history was replaced below what was clustered.
    if (active_episode_ >= 0) drop_episode_caches();
    return route;
  }
  const std::vector<ChatEpisode>& episodes = router_->episodes();
  if (route.clustered) start_episodes();
  add_unbuilt_episodes(episodes.size() - (route.created ? 1 : 0));
  if (route.created) {
    // A new topic starts from the nearest episode's cache (the paper starts from the turn alone;
    // Engram keeps what that cache remembers) and takes the turn as its patch.
    EpisodeCache fresh{episode_policy(episodes.back().patch_source), {}};
    const auto nearest = static_cast<int32_t>(
        std::max_element(route.cosines.begin(), route.cosines.end()) - route.cosines.begin());
    const auto created = static_cast<int32_t>(episode_caches_.size());
    if (nearest == active_episode_) {
      if (ws_->stream_tokens() > 0) {
        episode_kv().write_back(created, *ws_);
        fresh.ids = cached_ids_;
      }
    } else if (episode_kv().has(nearest)) {
      episode_kv().copy(nearest, created);
      fresh.ids = episode_caches_[nearest].ids;
    }
    episode_caches_.push_back(std::move(fresh));
  }
  for (int32_t e : route.patch_changed)
    set_episode_patch(e, episodes[e].patch_source);
  switch_episode(route.episode);
  if (route.rebuild) {
    ws_->clear();
    cached_ids_.clear();
  }
  return route;
}

std::optional<EpisodeTraceStep> ChatSession::episode_trace_step(const ChatReply& reply) const {
  if (!router_ || reply.route.episode < 0 || !router_->clustered()) return std::nullopt;
  const std::vector<std::string>& texts = router_->window_texts();
  std::vector<UtteranceWindow> windows;
  std::vector<Embedding> embeddings;
  size_t line = 0;
  for (size_t w = 0; w < texts.size(); ++w) {
    const auto lines = static_cast<size_t>(std::count(texts[w].begin(), texts[w].end(), '\n'));
    windows.push_back({line, line + lines});
    line += lines;
    embeddings.push_back(router_->centre(router_->window_embeddings()[w]));
  }
  const std::vector<ChatEpisode>& episodes = router_->episodes();
  EpisodeClustering clustering;
  clustering.assignment = router_->assignment();
  for (const ChatEpisode& e : episodes) {
    clustering.centroids.push_back(e.centroid);
    clustering.medoids.push_back(e.medoid);
  }
  // The routed turn is the last user message (the reply follows it in the history).
  std::string query;
  for (auto it = messages_.rbegin(); it != messages_.rend() && query.empty(); ++it)
    if (it->role == "user") query = it->content;
  EpisodeTraceStep step = make_episode_trace_step(windows, texts, embeddings, clustering,
                                                  EpisodeRouter::utterance_line("user", query),
                                                  reply.route.query, reply.route.episode);
  step.turn = static_cast<int64_t>(messages_.size() / 2);
  step.spec = policy_->spec();
  step.budget = policy_->budget();
  step.layers = model_.config.num_layers;
  step.query.created = reply.route.created;
  step.query.tau = router_->options().tau > 0 ? router_->options().tau : kNoNewEpisodes;
  for (size_t e = 0; e < episodes.size(); ++e) {
    EpisodeTraceEpisode& out = step.episodes[e];
    const bool active = static_cast<int32_t>(e) == active_episode_;
    const bool built = active || !episode_caches_[e].ids.empty();
    const int64_t tokens = active        ? ws_->tokens()
                           : episode_kv_ ? episode_kv_->tokens(static_cast<int32_t>(e))
                                         : 0;
    out.cache_tokens = built ? tokens : 0;
    out.fed_tokens = episodes[e].fed_since_build;
    out.built = active && (reply.route.clustered || reply.route.rebuild || reply.rebuilt);
  }
  return step;
}

std::string ChatSession::memory_note(const ChatReply& reply) const {
  std::string episode;
  if (reply.route.episode >= 0) {
    char cos[32];
    const double best = reply.route.cosines.empty() ? 0.0
                                                    : *std::max_element(reply.route.cosines.begin(),
                                                                        reply.route.cosines.end());
    std::snprintf(cos, sizeof cos, "%.2f", best);
    episode = "episode " + std::to_string(reply.route.episode + 1) + " of " +
              std::to_string(reply.episodes) + " (best cosine " + cos + ")";
    if (reply.route.clustered) episode += ", history clustered into episodes";
    if (reply.route.created) episode += ", a new episode for this topic";
    if (reply.route.rebuild) episode += ", re-clustered and rebuilt";
    episode += "; ";
  }
  if (reply.evicted_tokens == 0 && !reply.rebuilt && episode.empty()) return {};
  std::string note = "memory (" + policy_->spec() + ", budget " +
                     std::to_string(policy_->budget()) + "): " + episode;
  if (reply.rebuilt) note += "rebuilt from the text; ";
  if (reply.evicted_tokens > 0)
    note += std::to_string(reply.evicted_tokens) + " tokens moved out of attention; ";
  note += "attention holds " + std::to_string(reply.attention_tokens) + " of " +
          std::to_string(reply.stream_tokens) + " tokens; the text is kept whole";
  return note;
}

ChatReply ChatSession::generate_reply(const GenerationOptions& options,
                                      const std::function<void(const std::string&)>& on_text,
                                      const TurnProgressFn& on_progress) {
  const Tokenizer& tok = *model_.tokenizer;
  const ChatTemplate& tmpl = *model_.chat_template;
  const std::vector<int32_t> rendered =
      tmpl.encode(tok, messages_, /*add_generation_prompt=*/true, render_memo_);
  const std::vector<int64_t> prompt(rendered.begin(), rendered.end());

  ChatReply reply;
  if (router_) {
    reply.route = route_turn(static_cast<int64_t>(prompt.size()), on_progress);
    reply.episodes = static_cast<int64_t>(router_->episodes().size());
  }
  // The pool still being pinned (episodes started by this turn, on a short history) is waited
  // for before a decode step may be recorded: no CUDA call of its thread falls in a capture.
  if (episode_kv_ahead_.valid()) episode_kv_ahead_.wait();
  // An episode whose cache starts empty, or whose build a stopped turn or the work between
  // turns left unfinished, is built by this turn (block prefill of the history).
  const bool building = reply.route.episode >= 0 &&
                        (cached_ids_.empty() || build_ends_.contains(reply.route.episode));
  // Reuse the cached prefix; at least one token must be computed to get logits.
  const size_t common = sync_prefix(prompt, 1, &reply.rebuilt);

  // Never sample an id the tokenizer cannot turn into text (a padded embedding, or a shape
  // benchmarked with a smaller tokenizer).
  GenerationOptions limited = options;
  limited.prefill_chunk = block_;  // the block the working set has room for
  limited.evict_when_full = true;  // a turn's catch-up evicts only when the working set is full
  limited.kept_step = &decode_step_;
  if (tok.vocab_size() < model_.config.vocab_size) limited.sampling.vocab_limit = tok.vocab_size();
  if (on_progress) {
    TurnProgress progress;
    progress.stage = building ? TurnProgress::Stage::kBuilding : TurnProgress::Stage::kReading;
    progress.episode = reply.route.episode;
    progress.episodes = static_cast<int32_t>(reply.episodes);
    limited.on_prefill_progress = [progress, &on_progress](int64_t done, int64_t total) mutable {
      progress.done = done;
      progress.total = total;
      on_progress(progress);
    };
  }

  reply.reused_tokens = static_cast<int64_t>(common);
  // ids -> text -> text before any stop string -> the reply without the format's delimiters
  // (engram's quotes), which is what the view shows and the history keeps.
  TokenStream stream(tok);
  StopStringMatcher stops(tmpl.stop_strings());
  ReplyDelimiterStripper delimiters(tmpl.reply_delimiters());
  bool stopped = false;
  auto show = [&](const std::string& text) {
    reply.text += text;
    if (on_text && !text.empty()) on_text(text);
  };
  auto emit = [&](const std::string& piece) {
    if (piece.empty() || stopped) return;
    show(delimiters.push(stops.push(piece)));
    if (stops.stopped()) stopped = true;
  };
  const std::vector<int64_t> fresh(prompt.begin() + static_cast<std::ptrdiff_t>(common),
                                   prompt.end());
  try {
    reply.generation =
        generate(*model_.decoder, *policy_, *ws_, cached_ids_, fresh, limited, [&](int64_t token) {
          emit(stream.push(static_cast<int32_t>(token)));
          return !stopped;
        });
  } catch (...) {
    // What was computed before the failure is not a prefix we can name: start over next time.
    if (ws_->stream_tokens() != static_cast<int64_t>(cached_ids_.size())) {
      ws_->clear();
      cached_ids_.clear();
    }
    throw;
  }
  // Layers the reply's retrieval left in host memory (LouisKV, Quest: `offload`) start back to the
  // device now, while the person reads: the copies are queued, not waited for, and the next
  // turn's prefill finds them there instead of beginning with them (on the 8B shape at 32K they
  // took 76 ms, at 53.9 GB/s on an H100).
  ws_->cache().restore_layers();
  emit(stream.finish());
  if (!stopped) show(delimiters.push(stops.finish()));
  show(delimiters.finish());
  // The working set now holds the prompt (the blocks done of it when the turn was cancelled in
  // its prefill) and the generated tokens that were fed back.
  keep_fed_prefix(prompt);
  reply.prefill_cancelled = ws_->stream_tokens() < static_cast<int64_t>(prompt.size());
  const int64_t fed = ws_->stream_tokens() - static_cast<int64_t>(prompt.size());
  cached_ids_.insert(cached_ids_.end(), reply.generation.tokens.begin(),
                     reply.generation.tokens.begin() + std::max<int64_t>(0, fed));
  if (reply.route.episode >= 0) {
    // The turn is the prompt after the conversation before it (its user message and reply);
    // the user message is set aside for the render and put back however it ends.
    struct SetAside {
      std::vector<ChatMessage>& messages;
      ChatMessage user;
      ~SetAside() { messages.push_back(std::move(user)); }
    } aside{messages_, std::move(messages_.back())};
    messages_.pop_back();
    const auto before_turn = static_cast<int64_t>(rendered_history().size());
    count_fed(reply.route.episode, static_cast<int64_t>(common), ws_->stream_tokens(),
              static_cast<int64_t>(prompt.size()), before_turn);
  }
  messages_.push_back({"assistant", reply.text});
  reply.evicted_tokens = reply.generation.evicted_tokens;
  reply.attention_tokens = ws_->tokens();
  reply.stream_tokens = ws_->stream_tokens();
  reply.memory_note = memory_note(reply);
  return reply;
}

}  // namespace engram
