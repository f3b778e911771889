// EpiCache's chat episodes in the store (core/policies/episode_router.h), in the tables the
// schema has for them: each utterance window is a memory segment (kind "chat_window", key
// "chat_window:<index>", its lines as text) with its embedding (owner kind "chat_window", the
// model fingerprint as the embedding model, since the vectors are the model's own states), the
// centring mean an embedding of owner kind "chat_window_mean", and each episode an `episodes` row
// (centroid, members, medoid segment). An episode created from a user's turn has no medoid
// window: its patch source is a segment of kind "chat_query". Only what changed is written: a
// window whose text is unchanged keeps its row and its vector, an unchanged episode its row.
// The episodes' KV caches are stored beside these rows by core/engine/episode_kv_store.h (the
// conversation store calls both in one transaction); a restore puts the router back first.
#pragma once

#include <cstdint>
#include <string>

#include "core/policies/episode_router.h"
#include "storage/database.h"

namespace engram {

// Writes the router's windows and episodes for conversation `id` (inside the caller's
// transaction); removes rows the router no longer has.
void save_episodes(storage::Database& db, int64_t conversation_id, const EpisodeRouter& router,
                   const std::string& embedding_model);
// Puts stored episodes back into `router`; false (router unchanged) when there are none, or
// when their vectors were made by another embedding model (the router then clusters again when
// needed).
bool restore_episodes(storage::Database& db, int64_t conversation_id, EpisodeRouter& router,
                      const std::string& embedding_model);

}  // namespace engram
