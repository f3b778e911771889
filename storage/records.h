// The plain values that go in and out of the store's repositories. Ids are SQLite rowids;
// times are Unix milliseconds; an absent conversation id means world memory, shared by all
// conversations of the profile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace engram::storage {

struct Conversation {
  std::int64_t id = 0;
  std::string name;  // unique within the profile
  std::int64_t created_ms = 0;
  std::int64_t updated_ms = 0;
  // The model (weights + RoPE settings) last used with it; lets a UI say "caches will be
  // rebuilt" without opening blobs.
  std::string model_fingerprint;
  // The memory policy spec ("streaming", "snapkv:window=32"; empty = the app's default) and the
  // KV budget per layer it runs with (0 = the policy's default). Schema version 3.
  std::string memory_policy;
  std::int64_t kv_budget = 0;
};

struct Utterance {
  std::int64_t conversation_id = 0;
  std::int64_t index = 0;  // 0, 1, 2, ... within the conversation, assigned by append
  std::string role;        // "system", "user", "assistant", "tool", ...
  std::string text;
  std::int64_t time_ms = 0;
  std::int64_t token_begin = 0;  // [token_begin, token_end) in the conversation's token stream
  std::int64_t token_end = 0;
};

// A piece of embodied memory (KEEP): its text is what the model reads; version counts the
// changes of the text and changed_step is the agent step of the last change, so a policy can
// tell which cached KV went stale.
struct MemorySegment {
  std::int64_t id = 0;
  std::optional<std::int64_t> conversation_id;
  std::string kind;  // e.g. "object", "room", "observation"; the engine's vocabulary
  std::string key;   // stable across versions, unique per conversation (or world)
  std::string text;
  std::int64_t version = 0;
  std::int64_t changed_step = 0;
};

enum class GroupState { kStatic, kDynamic };

// KEEP's memory groups: static groups keep their KV cached, dynamic ones are candidates for
// recomputation when their members change.
struct MemoryGroup {
  std::int64_t id = 0;
  std::optional<std::int64_t> conversation_id;
  std::string key;  // unique per conversation (or world)
  GroupState state = GroupState::kStatic;
  std::vector<std::int64_t> segment_ids;  // members, in order
};

// An EpiCache episode: a cluster of the conversation with its centroid (in embedding space),
// the medoid segment that represents it, and the per-layer KV budget of its compressed cache.
struct Episode {
  std::int64_t id = 0;
  std::int64_t conversation_id = 0;
  std::int64_t index = 0;  // unique within the conversation
  std::vector<float> centroid;
  std::optional<std::int64_t> medoid_segment_id;
  std::vector<std::int64_t> layer_budget;  // tokens kept per layer
  std::vector<std::int64_t> segment_ids;   // members, in order
};

// Who owns an embedding or a KV blob: a unit of the engine (an episode, a segment, a prompt
// cluster...) named by a kind and an id, inside a conversation or in world memory. Deleting the
// conversation deletes what its units own.
struct UnitRef {
  std::optional<std::int64_t> conversation_id;
  std::string kind;
  std::int64_t id = 0;
};

struct Embedding {
  UnitRef owner;
  std::string model;  // the embedding model's name; one vector per owner and model
  std::vector<float> vector;
};

// One KV blob: the keys/values of a unit for the layers [layer_begin, layer_end).
struct KvBlobKey {
  UnitRef unit;
  std::int32_t layer_begin = 0;
  std::int32_t layer_end = 0;
};

// What the bytes are: the store checks that shape and dtype account for every byte, and keeps
// the token positions the keys were rotated with (so they can be re-rotated, not re-prefilled).
struct KvLayout {
  std::string dtype;  // "bf16", "fp16", "fp32", "int8", "fp8_e4m3", "fp8_e5m2"
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> positions;
};

// The index row of a blob file in <profile>/kv/.
struct KvBlobRecord {
  std::int64_t id = 0;
  KvBlobKey key;
  KvLayout layout;
  std::string file_name;  // relative to the kv directory
  std::int64_t byte_size = 0;
  std::uint64_t checksum = 0;  // XXH64 of the file's bytes, seed 0
  std::string model_fingerprint;
  std::int64_t created_ms = 0;
};

std::string describe(const UnitRef& unit);   // "conversation 3 episode 7", "world segment 2"
std::string describe(const KvBlobKey& key);  // adds " layers [0, 16)"
const char* to_string(GroupState state);     // "static", "dynamic"
GroupState group_state_from_string(const std::string& text);  // throws std::invalid_argument

}  // namespace engram::storage
