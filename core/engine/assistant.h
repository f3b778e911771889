// The assistant as the desktop app sees it: a model, a profile's conversations and one open
// conversation, behind plain value types. No ATen, no Qt in this header (style rule 2), so the UI
// can hold an Assistant on its worker thread; the .cpp drives ChatSession, the loader and the
// store. One thread at a time uses an Assistant, except stop(), which only raises a flag.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/turn_progress.h"
#include "core/policies/episode_trace.h"
#include "core/trace/engine_observer.h"
#include "storage/conversation_export.h"

namespace engram {

struct AssistantSampling {
  int64_t max_new_tokens = 256;
  double temperature = 0.7;  // 0 = greedy
  int64_t top_k = 40;
  double top_p = 0.95;
  double repetition_penalty = 1.1;
  uint64_t seed = 0;
};

struct ModelLoadRequest {
  std::filesystem::path dir;    // a Hugging Face folder; empty: the bundled model
  std::string device = "auto";  // "auto", "cpu", "cuda", "cuda:N"
  std::string dtype = "auto";   // "auto", "f32", "bf16", "f16"
};

struct ModelLoadProgress {
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  double seconds = 0;
  std::string tensor;
};

struct ModelInfo {
  std::string name;
  std::filesystem::path dir;
  std::string device;  // "cpu", "cuda:0"
  std::string dtype;   // "f32", "bf16", "f16"
  std::string chat_template;
  std::string fingerprint;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  int64_t max_positions = 0;
  int64_t kv_bytes_per_token = 0;
  double load_seconds = 0;
};

struct ConversationInfo {
  int64_t id = 0;
  std::string name;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  std::string model_fingerprint;
};

struct ConversationMessage {
  std::string role;  // "user", "assistant", "system"
  std::string text;
};

// A memory policy (core/policies) by spec ("streaming", "snapkv:window=32") and the KV budget
// attention sees per layer (0 = the policy's default: the model's positions less one block).
struct MemoryPolicyChoice {
  std::string spec;
  int64_t kv_budget = 0;
};

struct OpenedConversation {
  ConversationInfo info;
  std::vector<ConversationMessage> messages;
  std::string note;           // e.g. why stored KV could not be used; empty when nothing to say
  MemoryPolicyChoice policy;  // the conversation's memory policy
};

struct ReplyStats {
  std::string text;
  int64_t request = 0;
  int64_t prompt_tokens = 0;  // prefilled by this request
  int64_t reused_tokens = 0;  // served from the conversation's cache
  int64_t generated_tokens = 0;
  double time_to_first_token_ms = 0;
  double tokens_per_s = 0;
  double total_ms = 0;
  std::string stop_reason;  // "eos", "length", "stop", "cancelled"
  // The memory policy's side of the turn: what left attention, what attention holds of the
  // whole conversation, and one line for the chat (empty when nothing moved).
  int64_t evicted_tokens = 0;
  int64_t attention_tokens = 0;
  int64_t conversation_tokens = 0;
  std::string memory_note;
  // EpiCache: the episodes panel's step for this turn (null when the turn was not routed).
  std::shared_ptr<const EpisodeTraceStep> episode_step;
};

struct MemoryPolicyInfo {
  std::string name;
  std::string summary;
  bool bounded = true;  // takes a budget
};

// Where a unit's KV lives now. kDisk: in the profile's store, not loaded (restore_memory() brings
// it in), or an EpiCache episode spilled to the engine's scratch file; kNone: only its text exists
// (it is prefilled on the next reply). kPinnedCpu: page-locked host memory (EpiCache's waiting
// episodes; a restore stages through it on its way to the GPU).
// kEvicted: the policy moved it out of attention and no KV of it is kept (its text is). A unit
// out of attention whose KV persistence kept is at kDisk (the store's runs) or kCpu (captured in
// host memory, written at the next save), state "evicted, KV kept".
enum class MemoryLocation : uint8_t { kGpu, kPinnedCpu, kCpu, kDisk, kNone, kEvicted };
inline constexpr int kMemoryLocationCount = 6;
const char* memory_location_name(MemoryLocation location);

// A memory unit of the open conversation. Today: one per utterance (its span of the rendered
// conversation, template tokens included), plus the open turn while a reply is generated.
// Segments, groups, episodes and clusters join with their policies.
struct MemoryUnit {
  // "utterance", "turn", "session" (stored KV while no model is loaded), "episode" (an EpiCache
  // episode's cache waiting in the paged pool; the routed one is the utterances' working set)
  std::string kind;
  int64_t index = 0;
  std::string role;
  std::string preview;
  int64_t tokens = 0;
  MemoryLocation location = MemoryLocation::kNone;
  int64_t bytes = 0;
  int64_t version = 1;
  // "cached", "partly cached", "generating", "text only", "stored", "partly stored", "evicted",
  // "evicted, KV kept", "partly evicted", "episode waiting"
  std::string state;
  int64_t attention_tokens = 0;  // of `tokens`, in attention (mean over layers and KV heads)
};

struct MemorySnapshot {
  int64_t conversation_id = 0;
  std::vector<MemoryUnit> units;
  int64_t bytes_by_location[kMemoryLocationCount] = {};
  int64_t tokens_by_location[kMemoryLocationCount] = {};
  // What the engine itself reports for the conversation's KV cache.
  int64_t engine_cached_tokens = 0;
  int64_t engine_cache_bytes = 0;
  std::string engine_device;
  // Layers of the cache waiting in pinned host memory (decode-time retrieval's offload: back on
  // the device at the next prefill), of engine_layers.
  int64_t engine_host_layers = 0;
  int64_t engine_layers = 0;
  // The conversation's KV in the profile's store (what a restart brings back), whether or not it
  // is loaded: tokens, the KV blob and the blob of the token ids it was computed for.
  int64_t stored_tokens = 0;
  int64_t stored_kv_bytes = 0;
  int64_t stored_token_id_bytes = 0;
  // EpiCache: episodes whose caches are in the store, and their bytes (units and states).
  int64_t stored_episode_caches = 0;
  int64_t stored_episode_kv_bytes = 0;
};

class ChatSession;
// EpiCache: one "episode" unit per episode waiting in the session's paged pool (pinned host
// memory, or the spill file when more wait than it holds), `per_token` bytes a token.
void add_waiting_episodes(MemorySnapshot& snap, const ChatSession& session, int64_t per_token);

// What restore_memory() did with the open conversation's stored KV.
struct MemoryRestore {
  bool attempted = false;  // false: nothing stored, already loaded, or no model
  bool restored = false;
  int64_t tokens = 0;  // tokens whose KV came from the store
  int64_t bytes = 0;
  double ms = 0;
  // Why the stored KV was not used, for the person (the conversation's text is kept; the next
  // reply prefills it): another model's KV, a damaged or missing blob file, another dtype.
  std::string notice;
  bool damaged = false;  // the blob is missing, truncated or fails its checksum
};

// What save_memory() wrote.
struct MemorySave {
  int64_t tokens = 0;
  int64_t kv_bytes = 0;
  int64_t completed_tokens = 0;  // prefilled so the cache covers the whole rendered history
  double ms = 0;
};

class Assistant {
 public:
  // Opens (creates) the profile's store read-write; throws storage::StoreError (e.g. the profile
  // is used by another process). An empty path means storage::default_profile_dir().
  explicit Assistant(std::filesystem::path profile_dir = {});
  ~Assistant();
  Assistant(const Assistant&) = delete;
  Assistant& operator=(const Assistant&) = delete;

  // The model shipped with Engram, engram-tiny (issue 5): $ENGRAM_MODEL_DIR, next to an install
  // (<prefix>/share/engram/models/engram-tiny), or resources/models/engram-tiny of the source
  // tree.
  static std::filesystem::path bundled_model_dir(const std::filesystem::path& executable_dir = {});

  // Replaces the loaded model (the open conversation keeps its text; its cache is rebuilt on the
  // next reply). Throws ModelError / std::runtime_error / std::bad_alloc with a readable what();
  // the previous model stays loaded then.
  ModelInfo load(const ModelLoadRequest& request,
                 const std::function<void(const ModelLoadProgress&)>& progress = {});
  bool loaded() const;
  ModelInfo model_info() const;
  std::filesystem::path profile_dir() const;

  std::vector<ConversationInfo> list_conversations();
  std::vector<ConversationInfo> search_conversations(const std::string& text);
  // An empty name picks "New conversation", "New conversation 2", ...
  ConversationInfo new_conversation(const std::string& name = {});
  // Reads the conversation's text and its stored KV's index (no blob is read: memory() shows the
  // KV on disk until restore_memory()). Throws storage::StoreError (NotFound, DatabaseCorrupt)
  // and leaves the current one open.
  OpenedConversation open_conversation(int64_t id);
  void rename_conversation(int64_t id, const std::string& name);
  void delete_conversation(int64_t id);  // closes it when it is the open one
  std::optional<int64_t> current_conversation() const;
  // Conversations to a file and back, without their KV (storage/conversation_export.h). Export
  // writes `ids` (all, oldest first, when empty) and returns how many it wrote. Import stores a
  // JSON file's conversations under new ids in one transaction and returns them; on
  // storage::ConversationFileError or StoreError nothing is imported. An imported conversation
  // has no stored KV: opening it rebuilds the cache from its text.
  int64_t export_conversations(const std::vector<int64_t>& ids,
                               storage::ConversationFileFormat format,
                               const std::filesystem::path& file);
  std::vector<ConversationInfo> import_conversations(const std::filesystem::path& file);
  std::vector<ConversationMessage> messages() const;

  // Adds the user's message to the open conversation (a new one when none is open), generates
  // the reply streaming text to `on_text`, and stores both. `on_progress` (may be empty) hears
  // what the turn does before its first token: indexing the conversation, building an episode's
  // cache from the history, reading a long prompt (core/engine/turn_progress.h). On failure
  // nothing half-done stays in the store or the history, and the exception propagates.
  ReplyStats send(const std::string& user_text, const AssistantSampling& sampling,
                  const std::function<void(const std::string&)>& on_text,
                  const TurnProgressFn& on_progress = {});
  // Generates the last reply again and replaces it in the store.
  ReplyStats regenerate(const AssistantSampling& sampling,
                        const std::function<void(const std::string&)>& on_text,
                        const TurnProgressFn& on_progress = {});
  // Asks the running generation to stop after its current token, or its prefill after the
  // current block (what the blocks done computed is kept: the next turn goes on from there). Any
  // thread.
  void stop();

  // Brings the open conversation's stored KV into the session when it is not loaded yet (after
  // open_conversation() or load()): ConversationStore checks the fingerprint and the checksum.
  // A KV that cannot be used leaves the text, and the next reply prefills it; the result says
  // why. send() and regenerate() call it first, so it only moves the cost to an earlier moment.
  MemoryRestore restore_memory();
  // Completes the cache to the rendered history (the tail of a reply whose generated ids differ
  // from its re-tokenized text, and the end-of-turn tokens), then writes the conversation's KV
  // to the store (ConversationStore::save), so a restart reuses every token. Call after each
  // reply, stopped ones included; it fsyncs the whole KV, so the app calls it after reporting the
  // reply. Throws storage::StoreError (e.g. StorageFull); the text stays stored either way.
  MemorySave save_memory();

  // Work between turns while nobody waits (EpiCache): one block of bringing a waiting episode of
  // the open conversation up to it (ChatSession::prepare_waiting_episode), so the next turn
  // routed there builds nothing. The app calls it again and again while it is idle, saving when
  // it returns nullopt (nothing left). Nullopt too without a model, a conversation, episodes, or
  // before the stored KV was brought in.
  std::optional<TurnProgress> prepare_memory_step();

  MemorySnapshot memory() const;

  // The memory policies a conversation can use, in menu order, and the one new chats get.
  static std::vector<MemoryPolicyInfo> memory_policies();
  static MemoryPolicyChoice default_memory_policy();
  // The open conversation's policy (the default when none is open). Setting it checks the spec
  // and budget against the loaded model (std::invalid_argument with a readable what()), stores
  // it with the conversation, and rebuilds the working set from the text on the next reply.
  MemoryPolicyChoice memory_policy() const;
  void set_memory_policy(const MemoryPolicyChoice& choice);

  // Receives layer intervals and request summaries of every request (null: none). The trace
  // switch costs the CUDA graph replay of decode, so it can be turned off.
  void set_observer(EngineObserver* observer, bool trace = true);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace engram
