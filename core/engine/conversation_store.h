// A ChatSession in the persistent store (storage/), so a conversation comes back after a restart
// without re-reading its history. A conversation is a row (by name, with the model fingerprint,
// its memory policy and KV budget), its utterances (role, text, time, token span in the rendered
// history) and its KV, append-only (issue 14):
//   kv_run       one per save that added tokens, unit id = the first stream token it holds:
//                dtype of the cache, [2 (keys, values), layers, kv_heads, n, head_dim], keys
//                after RoPE at the positions in the layout (as the working set held them when
//                they were captured: before a plan moved them out, or at the save);
//   kv_run_ids   uint8 [n, 8]: those tokens' ids, little-endian int64 (the tokens the KV was
//                computed for: prompts and fed-back generated tokens, not a re-tokenization);
//   kv_manifest  uint8 [L or 1, H or 1, slots, 8]: the stream token each working-set slot holds,
//                its layout's one position = the stream tokens stored. Replaced at every save
//                (a few bytes per slot); runs are never rewritten unless a regenerate or a
//                rebuild cut the stream before their end.
// A save writes only what the store lacks, in one transaction with the utterances, so the rows,
// the runs and the manifest never disagree. Conversations saved before runs existed have one
// whole-session blob ("session" + "session_token_ids"); they restore as before and their next
// save rewrites them as runs.
//
// restore() installs the stored KV only when its fingerprint equals the loaded model's and its
// layout fits the session's working set; it reads every run's ids but the KV only of runs that
// hold a slot (a streaming conversation reads its sinks' run and the recent ones). Otherwise
// (another model: BlobStale, a damaged file: BlobCorrupt, missing or mismatched blobs) it keeps
// the text and rebuilds the working set by prefilling the history, and says why.
//
// Under EpiCache, once the conversation is clustered, its episodes are stored instead
// (core/engine/episode_store.h: windows, centroids, members, medoids) and every episode's KV
// cache beside them (core/engine/episode_kv_store.h: the units of the session's episode pool,
// append-only, and a small state per episode); a restore puts back each episode whose cache fits
// and rebuilds the others from the text between turns (ChatSession::prepare_waiting_episode)
// or when a turn is first routed to them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/chat_session.h"
#include "storage/database.h"

namespace engram {

// Why a restore did not use the stored KV.
enum class KvRebuildCause : uint8_t {
  kNone,        // the KV was restored
  kNotStored,   // no blobs (saved with an empty cache, or for another number of layers)
  kOtherModel,  // BlobStale: made by another model
  kDamaged,     // BlobCorrupt: missing, truncated or failing its checksum
  kLayout,      // dtype or shape differ from the session's cache
  kEpisodic,    // EpiCache: episodes restored without stored caches (saved before caches were
                // stored): each is rebuilt between turns or when a turn is routed to it
};

struct ConversationRestore {
  int64_t conversation_id = 0;
  int64_t utterances = 0;        // messages put back into the session's history
  int64_t cached_tokens = 0;     // tokens whose KV came from the store (0 when rebuilt)
  int64_t prefilled_tokens = 0;  // tokens recomputed from text by a rebuild
  bool kv_restored = false;
  std::string rebuild_reason;  // empty when the KV was restored; else why it was rebuilt
  KvRebuildCause rebuild_cause = KvRebuildCause::kNone;
  int64_t kv_bytes_read = 0;  // KV bytes read from run files (only runs holding a slot)
  double open_ms = 0;         // reading rows and the blob files (checksums included)
  double install_ms = 0;      // staging buffer -> the session's KvCache
  double rebuild_ms = 0;
  bool episodes_restored = false;  // epicache: the episodes (router) came back
  // epicache: episodes whose KV cache came back from the store, and those whose stored cache
  // could not be used (damaged, another model or layout; every episode when the conversation was
  // saved before caches were stored: kEpisodic), rebuilt from the text when a turn is first
  // routed to them, one reason each ("episode 2: ..."). An episode no turn had built when it was
  // saved is built when first routed to, as without the restart. kv_restored: none is rebuilt;
  // cached_tokens and kv_bytes_read count every restored episode's working set.
  int64_t episode_caches_restored = 0;
  int64_t episode_caches_rebuilt = 0;
  std::vector<std::string> episode_rebuild_reasons;
};

// A conversation's stored KV as the blob index describes it; no file is read, so a UI can show
// what is on disk without paying for a restore (the checksum is checked only by restore()).
struct StoredSessionKv {
  int64_t tokens = 0;            // stream tokens stored (the conversation as computed)
  int64_t attention_tokens = 0;  // slots of the stored working set (what a restore installs)
  int64_t runs = 0;              // append-only runs (0 for a whole-session blob)
  int64_t manifest_bytes = 0;
  int64_t kv_bytes = 0;
  int64_t token_id_bytes = 0;
  std::string dtype;
  std::string model_fingerprint;
  std::string kv_file;  // the newest KV run's file name in the profile's kv/ directory
  // EpiCache: episodes with a stored cache (episode_kv_state blobs) and their blobs' bytes.
  int64_t episode_caches = 0;
  int64_t episode_kv_bytes = 0;
};

// What one save wrote of EpiCache's episode caches (core/engine/episode_kv_store.h).
struct EpisodeKvSave {
  int64_t episodes = 0;       // episodes with a cache
  int64_t units_written = 0;  // episode_kv blobs written
  int64_t units_kept = 0;     // already stored: not written again
  int64_t kv_bytes_written = 0;
  int64_t states_written = 0;  // episode_kv_state blobs written (the others were unchanged)
  int64_t state_bytes_written = 0;
  int64_t blobs_removed = 0;  // units and states of replanned, rebuilt or dropped episodes
  // Replanned episodes whose stored version was kept (they lag by fewer tokens than the store's
  // episode_rewrite_lag), and the stream tokens they lag by together.
  int64_t episodes_deferred = 0;
  int64_t tokens_behind = 0;
};

class ConversationStore {
 public:
  // Unit kind of the session blobs (their unit id is the conversation id).
  static constexpr const char* kUnitKind = "session";
  // Unit kind of the append-only KV runs (their unit id is the first stream token they hold).
  static constexpr const char* kRunKind = "kv_run";

  explicit ConversationStore(storage::Database& db);

  bool exists(const std::string& name);
  // Creates the conversation when absent, brings its utterances in line with the session's
  // history (appends new ones; a changed tail, e.g. after regenerate, is replaced) and replaces
  // its KV blobs with the session's cache, all in one transaction. Returns the conversation id.
  int64_t save(const std::string& name, ChatSession& session);
  // Puts the stored conversation into `session` (its history is replaced). std::nullopt when no
  // conversation has that name. With rebuild = false a KV that cannot be used leaves the cache
  // empty (the next reply then prefills everything) instead of prefilling at once.
  std::optional<ConversationRestore> restore(const std::string& name, ChatSession& session,
                                             bool rebuild = true);
  // The index entries of the session blobs of conversation `id` (and its episode caches');
  // std::nullopt when it has none.
  std::optional<StoredSessionKv> stored_kv(int64_t conversation_id);

  // What the last save() wrote of EpiCache's episode caches (all zero for other policies).
  const EpisodeKvSave& last_episode_save() const { return last_episode_save_; }
  // EpiCache replans the routed episode at nearly every turn (every kept key re-rotated), so
  // writing it whole at every save would write the working set per reply (~0.94 GB on the 3B
  // shape bf16 at M = 8,192). A save keeps an episode's stored version until the episode's
  // stream has grown by this many tokens past it; a restore then catches up at most that many
  // tokens of prefill. 0 writes every replanned episode at every save.
  static constexpr int64_t kEpisodeRewriteLag = 2048;
  void set_episode_rewrite_lag(int64_t tokens) { episode_rewrite_lag_ = tokens; }

 private:
  storage::Database& db_;
  EpisodeKvSave last_episode_save_;
  int64_t episode_rewrite_lag_ = kEpisodeRewriteLag;
};

}  // namespace engram
