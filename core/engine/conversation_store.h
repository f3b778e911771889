// A ChatSession in the persistent store (storage/), so a conversation comes back after a restart
// without re-reading its history. A conversation is a row (by name, with the model fingerprint),
// its utterances (role, text, time, token span in the rendered history) and two blobs of the
// unit ("session", conversation id) over all layers:
//   kv         dtype of the cache, shape [2 (keys, values), layers, kv_heads, tokens, head_dim],
//              keys after RoPE, with the token positions in the layout;
//   token_ids  uint8 [tokens, 8]: the cached ids as little-endian int64 (the tokens the KV was
//              computed for: prompts and fed-back generated tokens, not a re-tokenization).
// Both blobs and the utterances are written in one transaction, so they never disagree.
//
// restore() installs the stored KV only when its fingerprint equals the loaded model's and its
// layout fits the session's cache; otherwise (another model: BlobStale, a damaged file:
// BlobCorrupt, no or mismatched blobs) it keeps the text and rebuilds the cache by prefilling
// the history, and says why. Stored KV is never used for another model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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
};

struct ConversationRestore {
  int64_t conversation_id = 0;
  int64_t utterances = 0;        // messages put back into the session's history
  int64_t cached_tokens = 0;     // tokens whose KV came from the store (0 when rebuilt)
  int64_t prefilled_tokens = 0;  // tokens recomputed from text by a rebuild
  bool kv_restored = false;
  std::string rebuild_reason;  // empty when the KV was restored; else why it was rebuilt
  KvRebuildCause rebuild_cause = KvRebuildCause::kNone;
  double open_ms = 0;     // reading rows and the blob files (checksums included)
  double install_ms = 0;  // staging buffer -> the session's KvCache
  double rebuild_ms = 0;
};

// A conversation's stored KV as the blob index describes it; no file is read, so a UI can show
// what is on disk without paying for a restore (the checksum is checked only by restore()).
struct StoredSessionKv {
  int64_t tokens = 0;
  int64_t kv_bytes = 0;
  int64_t token_id_bytes = 0;
  std::string dtype;
  std::string model_fingerprint;
  std::string kv_file;  // the KV blob's file name in the profile's kv/ directory
};

class ConversationStore {
 public:
  // Unit kind of the session blobs (their unit id is the conversation id).
  static constexpr const char* kUnitKind = "session";

  explicit ConversationStore(storage::Database& db);

  bool exists(const std::string& name);
  // Creates the conversation when absent, brings its utterances in line with the session's
  // history (appends new ones; a changed tail, e.g. after regenerate, is replaced) and replaces
  // its KV blobs with the session's cache, all in one transaction. Returns the conversation id.
  int64_t save(const std::string& name, const ChatSession& session);
  // Puts the stored conversation into `session` (its history is replaced). std::nullopt when no
  // conversation has that name. With rebuild = false a KV that cannot be used leaves the cache
  // empty (the next reply then prefills everything) instead of prefilling at once.
  std::optional<ConversationRestore> restore(const std::string& name, ChatSession& session,
                                             bool rebuild = true);
  // The index entries of the session blobs of conversation `id`; std::nullopt when it has none.
  std::optional<StoredSessionKv> stored_kv(int64_t conversation_id);

 private:
  storage::Database& db_;
};

}  // namespace engram
