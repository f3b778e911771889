// A conversation with a loaded model under a memory policy (core/policies). The session keeps the
// stream of every token fed so far and a working set of their KV that the policy bounds, so a new
// turn prefills only its own tokens and a chat longer than the model's positions keeps going
// (positions are compacted). The cached stream is compared with the newly rendered prompt and cut
// back to the common prefix (regenerate and edits work that way); a cut inside what the policy
// compacted rebuilds the working set from the text. Replies stream as text that never splits a
// UTF-8 character or shows a partial stop string; the template's reply delimiters (engram's
// quotes) are neither shown nor kept.
//
// Under `epicache` the session keeps episodic caches (EpiCache online; DESIGN.md "EpiCache"):
// while the conversation fits the budget there is one cache; once it outgrows it the utterances
// are clustered into episodes (core/policies/episode_router.h), each with its own working set
// built by block prefill eviction guided by its medoid's patch, and each user turn is routed to
// the nearest episode. Only the routed episode's cache sits in the session's working set (its
// fixed addresses serve the graph step); the others wait in host memory. An episode's stream is
// always a prefix of the rendered conversation: a routed episode first takes in, under its
// patch and the budget, whatever was said since it was last used, then the turn (write-back).
// A query below τ creates an episode (a copy of the routed cache with the turn as its patch);
// an episode fed more than budget + block since its build re-clusters and is rebuilt.
// The conversation store keeps every episode's cache (core/engine/episode_kv_store.h): a save
// checkpoints the active episode into the pool, a restore adopts the stored episodes into it, so
// a restored chat builds no episode that had a cache.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/episode_kv_pool.h"
#include "core/engine/generator.h"
#include "core/engine/loaded_model.h"
#include "core/engine/turn_progress.h"
#include "core/kv/working_set.h"
#include "core/policies/episode_router.h"
#include "core/policies/memory_policy.h"
#include "core/runtime/static_decode_step.h"

namespace engram {

struct EpisodeTraceStep;  // core/policies/episode_trace.h

// The embedding model under which a chat under epicache:embed=1 stores its window vectors: hashed
// word stems need no model, so they survive a change of model (the episodes' caches do not).
inline constexpr const char* kLexicalEmbeddingModel = "lexical-stems-v1";

// A memory policy by spec and budget (tokens of KV per layer; 0 = the policy's default).
struct PolicyChoice {
  std::string spec = "full";
  int64_t kv_budget = 0;
};

struct ChatReply {
  std::string text;
  GenerationResult generation;
  int64_t reused_tokens = 0;       // prompt tokens served from the session's working set
  int64_t evicted_tokens = 0;      // tokens that left attention during this turn
  int64_t attention_tokens = 0;    // KV slots per layer attention holds after the turn
  int64_t stream_tokens = 0;       // tokens of the whole conversation so far
  bool rebuilt = false;            // the working set was rebuilt from the text
  bool prefill_cancelled = false;  // cancelled before its prompt was in: no reply, blocks kept
  std::string memory_note;         // one line on what moved out of attention; empty when nothing
  EpisodeRoute route;              // epicache: where the turn went (episode -1: no episodes yet)
  int64_t episodes = 0;            // epicache: episodes after the turn
};

// An episode's cache as a store gives it back (core/engine/episode_kv_store.h).
struct RestoredEpisodeKv {
  int32_t episode = -1;
  std::vector<EpisodeKvUnit> units;  // in slot order
  WorkingSetLayout layout;
  std::vector<int64_t> ids;        // the episode's stream
  std::vector<at::Tensor> scores;  // its policy's Eq. 3 scores per layer (EpiCachePolicy)
  int64_t fed_since_build = 0;     // the router's count for the episode
};

class ChatSession {
 public:
  // Throws ModelError when the model has no tokenizer or chat template, std::invalid_argument
  // for an unknown policy or a budget it cannot use.
  explicit ChatSession(LoadedModel& model, std::string system_prompt = {},
                       PolicyChoice policy = {});

  // Adds the user's message, generates the reply, adds it to the history and returns it.
  // `on_text` receives the reply's text as it is generated, `on_progress` (may be empty) what the
  // turn does before its first token (indexing, an episode's build, its prefill). A turn cancelled
  // (GenerationOptions::cancel) in its prefill keeps the blocks it did: its reply is empty and the
  // next turn goes on from there (an episode's build included).
  ChatReply reply(const std::string& user_text, const GenerationOptions& options,
                  const std::function<void(const std::string&)>& on_text,
                  const TurnProgressFn& on_progress = {});
  // Drops the last assistant reply and generates it again.
  ChatReply regenerate(const GenerationOptions& options,
                       const std::function<void(const std::string&)>& on_text,
                       const TurnProgressFn& on_progress = {});

  // Replaces the history (e.g. a stored conversation); the working set keeps the common prefix.
  void set_history(std::vector<ChatMessage> messages);
  const std::vector<ChatMessage>& history() const { return messages_; }
  const KvCache& cache() const { return ws_->cache(); }
  const KvWorkingSet& working_set() const { return *ws_; }
  KvWorkingSet& working_set() { return *ws_; }
  const MemoryPolicy& policy() const { return *policy_; }
  const PolicyChoice& policy_choice() const { return choice_; }
  std::string policy_note() const { return policy_note_; }  // e.g. a lowered budget
  int64_t cached_tokens() const { return static_cast<int64_t>(cached_ids_.size()); }
  // The stream: every token fed, in order (prompts and the generated tokens fed back, which need
  // not equal a re-tokenization of the reply text; a store saves them with the KV).
  const std::vector<int64_t>& cached_ids() const { return cached_ids_; }
  const LoadedModel& model() const { return model_; }

  // EpiCache's episodes (null for every other policy); the store persists them.
  const EpisodeRouter* episodes() const { return router_.get(); }
  EpisodeRouter* episodes() { return router_.get(); }
  // The space the router's vectors live in, which a store keeps them apart by: the model's
  // fingerprint (its own mean-pooled states), or kLexicalEmbeddingModel under epicache:embed=1.
  std::string embedding_model() const;
  int32_t active_episode() const { return active_episode_; }
  // Where the waiting episodes' KV is (null before the first clustering), and how much of it the
  // pinned host tier holds before episodes spill to disk (set before the first clustering;
  // pinned_episodes 0: as many as the episodes of the first clustering).
  const EpisodeKvPool* episode_kv_pool() const { return episode_kv_.get(); }
  void set_episode_kv_options(EpisodeKvPoolOptions options);
  // Persistence of the episodes' caches (core/engine/episode_kv_store.h). checkpoint: writes the
  // active episode's working set into the pool as a switch would (append-only), so that every
  // episode's KV is units of the pool; returns the pool, null when no episode has KV.
  EpisodeKvPool* checkpoint_episode_kv();
  // Episode e's stream ids and its policy's scores (the active episode's are the session's own).
  const std::vector<int64_t>& episode_ids(int32_t episode) const;
  const std::vector<at::Tensor>& episode_scores(int32_t episode) const;
  // After the router was restored: every episode starts unbuilt, as after a clustering, and the
  // given ones wait in the pool with their caches (a turn routed there builds nothing). Returns,
  // per given episode, why it was refused (it is then rebuilt when routed to); empty when adopted.
  std::vector<std::string> adopt_episode_kv(std::vector<RestoredEpisodeKv> episodes);
  // Turns that built or rebuilt their episode's cache from the text (a block prefill of the
  // history) since the session began, and the builds done between turns.
  int64_t episode_builds() const { return episode_builds_; }
  // Work between turns (the app calls it while nobody waits, one block a call, so a new request
  // waits for one block at most): brings one waiting episode a block closer to the conversation
  // so far, by block prefill under its own patch and the budget as a turn routed there would:
  // first an episode fed past its limit is re-clustered and rebuilt (as the turn routed there
  // would), then an episode not built yet (otherwise the first turn routed there builds it from
  // the whole history: minutes on a CPU), then the one furthest behind by a block or more. A
  // conversation past the budget and not clustered yet (opened or imported long) is first
  // indexed and clustered (kIndexing steps: windows done of total), so that its first question
  // only routes. Last, the active episode is shrunk to its budget when it holds half a block
  // more, and written to the pool after a plan moved its slots (its next turn would otherwise
  // evict, and its switch write it all, while the person waits). The conversation must end with
  // a reply. Returns that episode, the tokens its stream now holds of the conversation's
  // `total`; nullopt when no episode needs it.
  std::optional<TurnProgress> prepare_waiting_episode();
  // Where the last prepare_waiting_episode() spent its host time (bench epicache): rendering
  // and comparing the conversation, a re-clustering, the switch of working sets, the prefill's
  // enqueue (the device may still be running it when the call returns), embedding windows, and
  // settling the active episode (its shrink to the budget and its write to the pool).
  struct PrepareTiming {
    double render_ms = 0, refresh_ms = 0, switch_ms = 0, prefill_ms = 0, index_ms = 0,
           settle_ms = 0;
  };
  const PrepareTiming& last_prepare_timing() const { return prepare_timing_; }
  // The episodes panel's view of a routed turn (core/policies/episode_trace.h): windows, episodes
  // with their cache sizes, the query; std::nullopt when the turn was not routed.
  std::optional<EpisodeTraceStep> episode_trace_step(const ChatReply& reply) const;

  // Keeps the KV of tokens that leave attention until a store takes it (append-only persistence;
  // ConversationStore turns it on). Off by default: without a store nothing is kept.
  void keep_for_store(bool keep);

  // Installs KV computed earlier for this model (a restored conversation): `cache` row 0 holds the
  // working set, `slot_stream` ([L, H, n] or [1, 1, n]) which stream token each slot holds,
  // `stream_ids` the stream. Throws std::invalid_argument when the layout does not fit; the
  // session is then unchanged. `stored_from` is the first stream token the store lacks.
  void adopt_working_set(const KvCache& cache, const at::Tensor& slot_stream,
                         std::vector<int64_t> stream_ids, int64_t stored_from);
  // Full KV restored as a plain cache: row 0 holds the KV of `cached_ids` at positions 0..n-1.
  void adopt_cache(std::unique_ptr<KvCache> cache, std::vector<int64_t> cached_ids);
  // Prefills the rendered history (without a generation prompt) past the cached prefix, so the
  // next reply computes only its own turn; returns the tokens prefilled (a rebuild from text).
  // Cancelled (control.cancel), it keeps the blocks it did.
  int64_t prefill_history(int64_t chunk = 0,  // 0: the session's block
                          const PrefillControl& control = {});

 private:
  ChatReply generate_reply(const GenerationOptions& options,
                           const std::function<void(const std::string&)>& on_text,
                           const TurnProgressFn& on_progress);
  // The stream after a prefill of `ids` past the cached prefix that may have been cancelled: the
  // ids the working set holds (all of them, or the blocks done).
  void keep_fed_prefix(const std::vector<int64_t>& ids);
  // Cuts the stream to its common prefix with `ids` (keeping at least `keep_last` ids to
  // compute); rebuilds from scratch when the cut falls inside compacted KV. Returns the kept count.
  size_t sync_prefix(const std::vector<int64_t>& ids, size_t keep_last, bool* rebuilt);
  std::string memory_note(const ChatReply& reply) const;
  // EpiCache: routes the turn (the last message, from the user) and installs the routed
  // episode's cache, policy and stream; `prompt_tokens` is the rendered conversation's length.
  EpisodeRoute route_turn(int64_t prompt_tokens, const TurnProgressFn& on_progress);
  // The router's view of the first `messages` messages (system prompt left out), and its
  // embedder (the model's own states, reporting progress as indexing; hashed word stems under
  // epicache:embed=1).
  std::vector<std::string> utterance_lines(size_t messages) const;
  TextsEmbedder embedder(const TurnProgressFn& on_progress) const;
  void switch_episode(int32_t episode);
  // Every episode's cache gone, no episode active, the working set empty under the base policy.
  void drop_episode_caches();
  // After the first clustering: the single cache is dropped and no episode is active yet.
  void start_episodes();
  // Episodes the router knows past the first `episode_caches_.size()` (just clustered, or
  // restored without a cache) start unbuilt, up to `known`.
  void add_unbuilt_episodes(size_t known);
  // prepare_waiting_episode() before the first clustering: a conversation past the budget has
  // its windows embedded (a block's worth a call) and then clustered, so that the next turn
  // only routes; nullopt while it fits the budget.
  std::optional<TurnProgress> cluster_ahead();
  // The messages' ids without a generation prompt (rendered_ids_, rendered again when they
  // changed).
  const std::vector<int64_t>& rendered_history();
  // prepare_waiting_episode() with nothing to build or catch up: the active episode shrunk to its
  // budget when it holds half a block more, and written to the pool when its next switch would
  // write more than a block (after a plan); else nullopt.
  std::optional<TurnProgress> settle_active(int64_t conversation_tokens);
  // A kPreparing step of the active episode: its stream's tokens of the conversation's.
  TurnProgress preparing_step(int64_t conversation_tokens) const;
  // An episode's patch tokens (its medoid window or query line, cut to fit beside a block).
  std::vector<int64_t> episode_patch(const std::string& patch_source) const;
  std::unique_ptr<MemoryPolicy> episode_policy(const std::string& patch_source) const;
  void set_episode_patch(int32_t episode, const std::string& patch_source);
  // Tells the router what episode `episode`'s stream took in ([before, after) of a conversation
  // of `conversation` tokens). A build from the text may take several calls (a stopped turn, the
  // work between turns): until the stream reaches where the conversation was when it started,
  // what it takes in is the build (its count of tokens fed since then stays 0), not new text that
  // moves it towards a rebuild. Of the rest only what lies from `own_from` on counts: the
  // episode's own turn, not the other turns it catches up on.
  void count_fed(int32_t episode, int64_t before, int64_t after, int64_t conversation,
                 int64_t own_from);

  // An episode while another one is active (its policy holds its patch and scores); its KV
  // waits in episode_kv_ (none stored: not built yet, the next route builds it).
  struct EpisodeCache {
    std::unique_ptr<MemoryPolicy> policy;
    std::vector<int64_t> ids;
  };
  EpisodeKvPool& episode_kv();
  void episode_kv_ahead();

  LoadedModel& model_;
  std::vector<ChatMessage> messages_;
  PolicyChoice choice_;
  std::unique_ptr<MemoryPolicy> policy_;
  std::string policy_note_;
  std::unique_ptr<KvWorkingSet> ws_;
  // The recorded decode step, kept from reply to reply: ws_ keeps its addresses, so on CUDA the
  // graph is recorded once, not at every reply (tens of milliseconds each on a 3B-8B model).
  std::unique_ptr<StaticDecodeStep> decode_step_;
  int64_t block_ = 512;                   // prefill block (session_prefill_block)
  ChatTemplate::EncodeMemo render_memo_;  // the history's text runs, encoded once
  // The history's ids without a generation prompt, for the messages they were rendered from:
  // every step between turns rendered the whole conversation again (1.6-5.8 ms a step at
  // 90-125K tokens on the GPU machines' hosts, the device idle meanwhile), though the messages
  // change only at a turn. Compared whole (~0.1 ms), so no edit can leave them stale.
  std::vector<ChatMessage> rendered_messages_;
  std::vector<int64_t> rendered_ids_;  // as the stream holds them
  bool rendered_ = false;
  std::vector<int64_t> cached_ids_;  // the stream
  std::unique_ptr<EpisodeRouter> router_;
  bool lexical_embedding_ = false;             // epicache:embed=1
  std::unique_ptr<MemoryPolicy> base_policy_;  // epicache without a patch: new episodes clone it
  std::vector<EpisodeCache> episode_caches_;   // the active one's members live in the fields above
  std::unique_ptr<EpisodeKvPool> episode_kv_;  // waiting episodes' KV (pinned pool, disk)
  EpisodeKvPoolOptions episode_kv_options_{.pinned_episodes = 0};
  // The pool being made on its own thread since the episodes started (episode_kv_ahead): pinning
  // its slab took ~0.7 s of the host before the first switch. `episode_kv_ahead_for_` is the
  // working set's capacity it was sized for.
  std::future<std::unique_ptr<EpisodeKvPool>> episode_kv_ahead_;
  int64_t episode_kv_ahead_for_ = 0;
  int32_t active_episode_ = -1;
  int64_t episode_builds_ = 0;
  PrepareTiming prepare_timing_;
  std::map<int32_t, int64_t> build_ends_;  // episode -> where its unfinished build ends
};

}  // namespace engram
