// EpiCache's episode caches in the conversation store (issue 15): every episode's KV working set
// is kept as blobs of the store (storage/kv_blob_store.h: durable files, checksum, model
// fingerprint), mirroring the units of the session's EpisodeKvPool (core/engine/episode_kv_pool.h),
// so a restored conversation routes its next turn to a cache instead of a block prefill of the
// whole history. Per episode e of a conversation (layer range [0, L)):
//   episode_kv        unit id (e << 32) | first slot: one pool unit, the working set's slots
//                     [first slot, first slot + n) in the cache dtype, [layers, 2, kv_heads, n,
//                     head_dim] (the pool's page layout), keys after RoPE at the positions in the
//                     layout (the slots' own: first slot..);
//   episode_kv_state  unit id e: uint8, what a restore needs beside the KV (little-endian int64
//                     words unless noted): format 1; the WorkingSetLayout (tokens, exact slot and
//                     stream, stream end, peak, evicted, ragged); the router's fed_since_build;
//                     the units (first slot, tokens, XXH64 of their blob); the compacted slot map
//                     [L, H, exact slot]; the policy's Eq. 3 scores per layer (heads, slots, f32);
//                     the episode's stream ids.
// Append-only like the pool: a save first checkpoints the active episode into the pool (a
// write-back, appending one unit after the slots unchanged since it was loaded or saved), then
// writes only units the store does not hold (the pool remembers each stored unit's checksum, and
// it is checked against the row) and a state whose bytes changed. A replanned or rebuilt episode
// has new units: they replace the old blobs in the same transaction, whose files are unlinked
// after the commit. An episode not routed to since the last save writes nothing. Each EpiCache
// turn past the budget replans the routed episode (a shrink after every prefill block), so in a
// chat the routed episode's working set (at most budget + block slots) is written per save.
//
// A restore reads each episode's state, checks every unit's row against it (checksum, dtype,
// shape; the store checks the fingerprint before reading and the file's checksum while reading)
// and adopts the units into the session's pool; an episode whose blobs are missing, damaged or
// another model's is left out, rebuilt from the text when a turn is routed to it, and the
// restore says why.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "storage/kv_blob_store.h"

namespace engram {

// The store's dtype name of a cache dtype ("fp32", "bf16", "fp16"); empty for others.
std::string kv_store_dtype(at::ScalarType dtype);

// What a restore put back.
struct EpisodeKvRestore {
  int64_t stored = 0;    // episodes with a stored state
  int64_t restored = 0;  // episodes whose cache came back
  int64_t tokens = 0;    // working-set slots restored, over every episode
  int64_t bytes_read = 0;
  double read_ms = 0;     // rows and blob files (checksums included)
  double install_ms = 0;  // into the session's pool
  // One line per stored episode that did not come back ("episode 2: ..."), and the cause of the
  // first of them (kNone when every stored episode came back).
  std::vector<std::string> problems;
  KvRebuildCause cause = KvRebuildCause::kNone;
};

// Inside the caller's transaction: checkpoints the session's active episode into its pool and
// writes what the store lacks of every episode's cache; removes episode blobs no episode holds.
// An episode that a replan rewrote and that grew by fewer than `rewrite_lag_tokens` stream
// tokens since its stored version keeps that version (0: always write the current one).
EpisodeKvSave save_episode_kv(storage::KvBlobStore& blobs, int64_t conversation_id,
                              ChatSession& session, int64_t rewrite_lag_tokens);
// After the session's router was restored (restore_episodes): puts the stored episode caches
// into the session (ChatSession::adopt_episode_kv).
EpisodeKvRestore restore_episode_kv(storage::KvBlobStore& blobs, int64_t conversation_id,
                                    ChatSession& session);
// Removes every episode blob of the conversation (it is no longer clustered); returns how many.
int64_t remove_episode_kv(storage::KvBlobStore& blobs, int64_t conversation_id);
// The fingerprint the conversation's episode blobs were made with; empty when there are none.
std::string episode_kv_fingerprint(storage::KvBlobStore& blobs, int64_t conversation_id);

}  // namespace engram
