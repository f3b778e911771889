#include "core/engine/assistant.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/loaded_model.h"
#include "core/log.h"
#include "core/model/dtype.h"
#include "core/model/model_error.h"
#include "core/policies/policy_registry.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/profile_paths.h"
#include "storage/store_error.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultName = "New conversation";
constexpr size_t kPreviewChars = 80;

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path{} : exe.parent_path();
}

std::string preview_of(const std::string& text) {
  std::string p = text.substr(0, std::min(text.size(), kPreviewChars));
  // Never cut a UTF-8 character in half.
  while (!p.empty() && p.size() < text.size() &&
         (static_cast<unsigned char>(text[p.size()]) & 0xC0) == 0x80) {
    p.pop_back();
  }
  std::replace(p.begin(), p.end(), '\n', ' ');
  return p;
}

ConversationInfo info_of(const storage::Conversation& c) {
  return {c.id, c.name, c.created_ms, c.updated_ms, c.model_fingerprint};
}

std::string device_name(const at::Device& device) {
  return device.is_cuda() ? "cuda:" + std::to_string(std::max<int>(0, device.index())) : "cpu";
}

}  // namespace

const char* memory_location_name(MemoryLocation location) {
  switch (location) {
    case MemoryLocation::kGpu:
      return "GPU";
    case MemoryLocation::kPinnedCpu:
      return "pinned CPU";
    case MemoryLocation::kCpu:
      return "CPU";
    case MemoryLocation::kDisk:
      return "disk";
    case MemoryLocation::kNone:
      return "text only";
    case MemoryLocation::kEvicted:
      return "evicted";
  }
  return "?";
}

void add_waiting_episodes(MemorySnapshot& snap, const ChatSession& session, int64_t per_token) {
  const EpisodeKvPool* pool = session.episode_kv_pool();
  if (!pool) return;
  for (const EpisodeKvPlace& p : pool->places()) {
    if (p.episode == session.active_episode() || p.tokens == 0) continue;
    MemoryUnit u;
    u.kind = "episode";
    u.index = p.episode + 1;
    u.preview = "episode " + std::to_string(p.episode + 1) + " (" + std::to_string(p.units) +
                (p.units == 1 ? " unit)" : " units)");
    u.tokens = p.tokens;
    u.location = p.tier == PageTier::kDisk ? MemoryLocation::kDisk : MemoryLocation::kPinnedCpu;
    u.bytes = p.tokens * per_token;
    u.state = "episode waiting";
    snap.bytes_by_location[static_cast<int>(u.location)] += u.bytes;
    snap.tokens_by_location[static_cast<int>(u.location)] += u.tokens;
    snap.units.push_back(std::move(u));
  }
}

// Tokens out of attention keep their KV where append-only persistence put it: stream tokens
// before `stored_until` are in the store's runs (disk), later ones were copied to host memory for
// the next save when `captured` (CPU), else no KV of them is kept.
namespace {
struct EvictedKv {
  int64_t stored_until = 0;
  bool captured = false;
};
}  // namespace

struct Assistant::State {
  std::unique_ptr<storage::Database> db;
  std::unique_ptr<LoadedModel> model;
  ModelInfo info;
  std::unique_ptr<ChatSession> session;
  std::optional<int64_t> conversation;
  std::vector<ConversationMessage> messages;  // of the open conversation, as stored
  std::atomic<bool> cancel{false};
  EngineObserver* observer = nullptr;
  bool trace = true;
  MemoryPolicyChoice policy = Assistant::default_memory_policy();
  bool generating = false;
  // The last reply was stopped in its prefill: the next save stores what is cached rather than
  // completing the history (which is the prefill that was stopped).
  bool prefill_cancelled = false;
  int64_t generating_from_tokens = 0;     // cache length when the open turn began
  std::optional<StoredSessionKv> stored;  // the open conversation's KV in the store (its index)
  bool kv_pending = false;                // `stored` is not in the session yet (restore_memory)

  storage::ConversationRepository repo() { return storage::ConversationRepository(*db); }

  void read_stored() {
    stored.reset();
    if (conversation) stored = ConversationStore(*db).stored_kv(*conversation);
  }

  // A session over the loaded model with the open conversation's text. Its stored KV, if any,
  // comes in with restore_memory(); otherwise the next reply prefills the text.
  void rebuild_session() {
    session.reset();
    kv_pending = false;
    if (!model) return;
    session = std::make_unique<ChatSession>(*model, std::string{},
                                            PolicyChoice{policy.spec, policy.kv_budget});
    session->keep_for_store(true);  // what leaves attention waits for save_memory()
    std::vector<ChatMessage> history;
    for (const auto& m : messages)
      history.push_back({m.role, m.text});
    session->set_history(std::move(history));
    kv_pending = conversation.has_value() && stored.has_value();
  }

  // One unit per message of `history` (plus the tokens past them) when the first `kv_tokens`
  // tokens of the rendered conversation have KV at `where`, `per_token` bytes each.
  // `presence` (when given) is the share of layers and KV heads in whose attention each token
  // of the stream still is: a policy moves tokens out.
  void add_units(MemorySnapshot& snap, const std::vector<ChatMessage>& history, int64_t kv_tokens,
                 MemoryLocation where, int64_t per_token, bool on_disk,
                 const std::vector<float>* presence = nullptr, EvictedKv evicted = {}) {
    const auto in_attention = [&](int64_t from, int64_t n) {
      if (!presence) return n;
      double sum = 0;
      for (int64_t i = from; i < from + n && i < static_cast<int64_t>(presence->size()); ++i)
        sum += (*presence)[static_cast<size_t>(i)];
      return static_cast<int64_t>(sum + 0.5);
    };
    // Out-of-attention tokens of [from, from + n) by where their KV is: disk, CPU, nowhere.
    const auto out_of_attention = [&](int64_t from, int64_t n) {
      std::array<double, 3> out{};
      if (!presence) return std::array<int64_t, 3>{};
      for (int64_t i = from; i < from + n && i < static_cast<int64_t>(presence->size()); ++i) {
        const double gone = 1.0 - (*presence)[static_cast<size_t>(i)];
        out[i < evicted.stored_until ? 0 : evicted.captured ? 1 : 2] += gone;
      }
      return std::array<int64_t, 3>{static_cast<int64_t>(out[0] + 0.5),
                                    static_cast<int64_t>(out[1] + 0.5),
                                    static_cast<int64_t>(out[2] + 0.5)};
    };
    const char* full = on_disk ? "stored" : "cached";
    const char* part = on_disk ? "partly stored" : "partly cached";
    const std::vector<int64_t> ends = message_ends(history);
    int64_t begin = 0;
    const auto count = [&](const MemoryUnit& u, int64_t with_kv) {
      if (u.location == MemoryLocation::kNone) return;
      snap.bytes_by_location[static_cast<int>(u.location)] += u.bytes;
      snap.tokens_by_location[static_cast<int>(u.location)] += with_kv;
    };
    for (size_t i = 0; i < history.size(); ++i) {
      const int64_t end = i < ends.size() ? ends[i] : begin;
      MemoryUnit u;
      u.kind = "utterance";
      u.index = static_cast<int64_t>(i);
      u.role = history[i].role;
      u.preview = preview_of(history[i].content);
      u.tokens = end - begin;
      const int64_t with_kv = std::clamp<int64_t>(kv_tokens - begin, 0, u.tokens);
      const int64_t kept = in_attention(begin, with_kv);
      u.attention_tokens = kept;
      const std::array<int64_t, 3> out = out_of_attention(begin, with_kv);
      if (with_kv > 0 && kept == 0) {
        // Wholly out of attention: the unit is where most of its KV is.
        const auto most = std::max_element(out.begin(), out.end()) - out.begin();
        u.location = most == 0   ? MemoryLocation::kDisk
                     : most == 1 ? MemoryLocation::kCpu
                                 : MemoryLocation::kEvicted;
        u.state = most == 2 ? "evicted" : "evicted, KV kept";
      } else if (with_kv == u.tokens && u.tokens > 0) {
        u.location = where;
        u.state = kept < with_kv ? "partly evicted" : full;
      } else if (with_kv > 0) {
        u.location = where;
        u.state = part;
      } else {
        u.location = MemoryLocation::kNone;
        u.state = "text only";
      }
      u.bytes = (kept > 0 ? kept : out[0] + out[1]) * per_token;
      if (u.location != MemoryLocation::kNone) {
        snap.tokens_by_location[static_cast<int>(where)] += kept;
        snap.bytes_by_location[static_cast<int>(where)] += kept * per_token;
      }
      const MemoryLocation places[3] = {MemoryLocation::kDisk, MemoryLocation::kCpu,
                                        MemoryLocation::kEvicted};
      for (int k = 0; k < 3; ++k) {
        snap.tokens_by_location[static_cast<int>(places[k])] += out[k];
        if (k < 2) snap.bytes_by_location[static_cast<int>(places[k])] += out[k] * per_token;
      }
      snap.units.push_back(u);
      begin = end;
    }
    // KV past the rendered messages: the open turn's prompt and the reply being generated (or the
    // generation prompt a finished reply was computed after).
    if (kv_tokens > begin) {
      MemoryUnit u;
      u.kind = "turn";
      u.index = static_cast<int64_t>(history.size());
      u.role = "assistant";
      u.preview = generating ? "(reply being generated)" : "(generation prompt)";
      u.tokens = kv_tokens - begin;
      u.attention_tokens = in_attention(begin, u.tokens);
      u.location = where;
      u.bytes = u.attention_tokens * per_token;
      u.state = generating ? "generating" : full;
      count(u, u.attention_tokens);
      snap.units.push_back(u);
    }
  }

  // What the person reads when the stored KV of `name` could not be used.
  static std::string restore_notice(const std::string& name, const ConversationRestore& r) {
    const std::string tail =
        " The conversation's text is intact: its memory is rebuilt from the text on the next "
        "answer and saved again.";
    switch (r.rebuild_cause) {
      case KvRebuildCause::kNone:
      case KvRebuildCause::kEpisodic:  // not a fault: episodes rebuild their caches when routed
        return {};
      case KvRebuildCause::kDamaged:
        return "The saved memory (KV cache) of \u201c" + name +
               "\u201d is damaged and was not used (" + r.rebuild_reason + ")." + tail;
      case KvRebuildCause::kOtherModel:
        return "The saved memory (KV cache) of \u201c" + name +
               "\u201d was computed by another model and was not used." + tail;
      case KvRebuildCause::kLayout:
      case KvRebuildCause::kNotStored:
        return "The saved memory (KV cache) of \u201c" + name +
               "\u201d does not fit the loaded model (" + r.rebuild_reason + ")." + tail;
    }
    return {};
  }

  std::string unique_name(const std::string& wanted) {
    std::string name = wanted.empty() ? kDefaultName : wanted;
    auto r = repo();
    for (int n = 2; r.find_by_name(name); ++n)
      name = (wanted.empty() ? kDefaultName : wanted) + " " + std::to_string(n);
    return name;
  }

  GenerationOptions options(const AssistantSampling& s) {
    GenerationOptions o;
    o.max_new_tokens = std::max<int64_t>(1, s.max_new_tokens);
    o.sampling.temperature = s.temperature;
    o.sampling.top_k = s.top_k;
    o.sampling.top_p = s.top_p;
    o.sampling.repetition_penalty = s.repetition_penalty;
    o.sampling.seed = s.seed;
    o.observer = observer;
    o.trace = observer != nullptr && trace;
    o.cancel = &cancel;
    return o;
  }

  void require_model() const {
    if (!model || !session)
      throw std::runtime_error("no model is loaded; pick one in the model bar");
  }

  // Removes utterances [from, end) of the open conversation (a failed turn, a regenerated reply).
  void drop_stored_tail(int64_t from) { repo().truncate(*conversation, from); }

  ReplyStats stats_of(const ChatReply& r, double total_ms) {
    ReplyStats s;
    s.text = r.text;
    s.prompt_tokens = r.generation.prompt_tokens;
    s.reused_tokens = r.reused_tokens;
    s.generated_tokens = static_cast<int64_t>(r.generation.tokens.size());
    s.time_to_first_token_ms = r.generation.time_to_first_token_ms;
    s.tokens_per_s = r.generation.decode_tokens_per_s;
    s.total_ms = total_ms;
    s.stop_reason = r.generation.stop_reason;
    s.evicted_tokens = r.evicted_tokens;
    s.attention_tokens = r.attention_tokens;
    s.conversation_tokens = r.stream_tokens;
    s.memory_note = r.memory_note;
    if (session) {
      if (auto step = session->episode_trace_step(r))
        s.episode_step = std::make_shared<const EpisodeTraceStep>(std::move(*step));
    }
    return s;
  }

  // Renders the first k messages for k = 1..n: each message's span of the rendered conversation
  // (its template tokens included). Falls back to the bare text's tokens when the template
  // refuses a prefix (Llama-2 wants alternating turns). The inspector asks ~10 times a second
  // while a reply streams, so the spans of an unchanged prefix of the history are kept.
  std::vector<int64_t> message_ends(const std::vector<ChatMessage>& history) {
    if (!model || !model->tokenizer || !model->chat_template) return {};
    size_t same = 0;
    while (same < ends_for.size() && same < history.size() &&
           ends_for[same].role == history[same].role &&
           ends_for[same].content == history[same].content) {
      ++same;
    }
    ends_for.resize(same);
    ends.resize(same);
    if (same == history.size()) return ends;
    int64_t running = same > 0 ? ends.back() : 0;
    std::vector<ChatMessage> prefix(history.begin(),
                                    history.begin() + static_cast<std::ptrdiff_t>(same));
    for (size_t i = same; i < history.size(); ++i) {
      const ChatMessage& m = history[i];
      prefix.push_back(m);
      int64_t end = 0;
      try {
        end = static_cast<int64_t>(
            model->chat_template->encode(*model->tokenizer, prefix, false).size());
      } catch (const std::exception&) {
        end = running + static_cast<int64_t>(model->tokenizer->encode(m.content).size());
      }
      running = std::max(running, end);
      ends.push_back(running);
      ends_for.push_back(m);
    }
    return ends;
  }
  std::vector<ChatMessage> ends_for;  // the history message_ends() last measured
  std::vector<int64_t> ends;
};

Assistant::Assistant(fs::path profile_dir) : s_(std::make_unique<State>()) {
  if (profile_dir.empty()) profile_dir = storage::default_profile_dir();
  s_->db = std::make_unique<storage::Database>(profile_dir, storage::Access::kReadWrite);
}

Assistant::~Assistant() {
  s_->session.reset();
  s_->model.reset();
}

fs::path Assistant::bundled_model_dir(const fs::path& executable_dir_in) {
  if (const char* env = std::getenv("ENGRAM_MODEL_DIR"); env && *env) return env;
  const fs::path exe = executable_dir_in.empty() ? executable_dir() : executable_dir_in;
  std::vector<fs::path> candidates;
  if (!exe.empty()) {
    candidates.push_back(exe / ".." / "share" / "engram" / "models" / "engram-tiny");
    // Build trees: <source>/<build>/app/gui/engram and <source>/<build>/tests/test_x.
    for (fs::path p = exe; !p.empty() && p != p.root_path(); p = p.parent_path()) {
      candidates.push_back(p / "resources" / "models" / "engram-tiny");
    }
  }
#ifdef ENGRAM_SOURCE_DIR
  candidates.push_back(fs::path(ENGRAM_SOURCE_DIR) / "resources" / "models" / "engram-tiny");
#endif
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::exists(c / "config.json", ec)) return fs::weakly_canonical(c, ec);
  }
  return candidates.empty() ? fs::path{} : candidates.front();
}

ModelInfo Assistant::load(const ModelLoadRequest& request,
                          const std::function<void(const ModelLoadProgress&)>& progress) {
  ModelSource source;
  source.dir = request.dir.empty() ? bundled_model_dir() : request.dir;
  if (!fs::exists(source.dir / "config.json")) {
    throw ModelError(source.dir.string(), "not a model folder: config.json is missing");
  }
  const DeviceChoice device = choose_device(request.device, request.dtype);
  auto model = std::make_unique<LoadedModel>(load_model(source, device, [&](const LoadProgress& p) {
    if (progress) progress({p.bytes_done, p.bytes_total, p.seconds, p.tensor});
  }));
  if (!model->tokenizer || !model->chat_template) {
    throw ModelError(source.dir.string(),
                     "chat needs tokenizer.model or tokenizer.json in the model folder");
  }
  try {  // EpiCache's layer calibration of these weights (`engram-cli calibrate`), if stored
    model->layer_calibration =
        find_layer_calibration(profile_dir(), model->fingerprint, model->config.num_layers);
  } catch (const LayerCalibrationError& e) {
    log::warn(e.what());
  }
  ModelInfo info;
  info.name = model->name;
  info.dir = source.dir;
  info.device = device_name(model->decoder->device());
  info.dtype = dtype_short_name(from_scalar_type(model->decoder->dtype()));
  info.chat_template = std::string(chat_template_kind_name(model->chat_template->kind()));
  info.fingerprint = model->fingerprint;
  const ModelConfig& c = model->config;
  info.layers = c.num_layers;
  info.hidden = c.hidden_size;
  info.kv_heads = c.num_kv_heads;
  info.head_dim = c.head_dim;
  info.vocab = c.vocab_size;
  info.max_positions = c.max_positions;
  info.kv_bytes_per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim *
                            static_cast<int64_t>(at::elementSize(model->decoder->dtype()));
  info.load_seconds = model->load_seconds;
  // The old session refers to the old model: drop it first.
  s_->session.reset();
  s_->model = std::move(model);
  s_->info = info;
  s_->ends_for.clear();  // spans measured with the previous tokenizer
  s_->ends.clear();
  s_->rebuild_session();
  return info;
}

bool Assistant::loaded() const {
  return s_->model != nullptr;
}
ModelInfo Assistant::model_info() const {
  return s_->info;
}
fs::path Assistant::profile_dir() const {
  return s_->db->paths().dir;
}

std::vector<ConversationInfo> Assistant::list_conversations() {
  std::vector<ConversationInfo> out;
  for (const auto& c : s_->repo().list())
    out.push_back(info_of(c));
  return out;
}

std::vector<ConversationInfo> Assistant::search_conversations(const std::string& text) {
  if (text.empty()) return list_conversations();
  auto repo = s_->repo();
  std::vector<ConversationInfo> out;
  try {
    for (const auto& c : repo.search(text))
      out.push_back(info_of(c));
    return out;
  } catch (const storage::DatabaseCorrupt&) {
    // One damaged conversation must not hide the others: search each one alone.
    out.clear();
  }
  const auto contains = [&text](const std::string& hay) {
    return std::search(hay.begin(), hay.end(), text.begin(), text.end(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) ==
                    std::tolower(static_cast<unsigned char>(b));
           }) != hay.end();
  };
  for (const auto& c : repo.list()) {
    bool found = contains(c.name);
    try {
      for (const auto& u : found ? std::vector<storage::Utterance>{} : repo.utterances(c.id))
        found = found || contains(u.text);
    } catch (const storage::DatabaseCorrupt&) {
      // Its name was searched; its text cannot be read.
    }
    if (found) out.push_back(info_of(c));
  }
  return out;
}

ConversationInfo Assistant::new_conversation(const std::string& name) {
  const auto c = s_->repo().create(s_->unique_name(name), s_->info.fingerprint);
  s_->repo().set_memory_policy(c.id, s_->policy.spec, s_->policy.kv_budget);
  s_->conversation = c.id;
  s_->messages.clear();
  s_->stored.reset();
  s_->rebuild_session();
  return info_of(c);
}

OpenedConversation Assistant::open_conversation(int64_t id) {
  auto repo = s_->repo();
  const bool already_open = s_->conversation == id && s_->session;
  OpenedConversation opened;
  const storage::Conversation row = repo.load(id);
  opened.info = info_of(row);
  // The conversation's own policy; an unknown one (a newer Engram's) falls back to the default.
  opened.policy = {row.memory_policy, row.kv_budget};
  try {
    if (opened.policy.spec.empty()) throw std::invalid_argument("no policy stored");
    opened.policy.spec = make_policy(opened.policy.spec)->spec();
  } catch (const std::invalid_argument&) {
    opened.policy = default_memory_policy();
  }
  const bool same_policy =
      opened.policy.spec == s_->policy.spec && opened.policy.kv_budget == s_->policy.kv_budget;
  s_->policy = opened.policy;
  for (const auto& u : repo.utterances(id))
    opened.messages.push_back({u.role, u.text});
  if (!s_->info.fingerprint.empty() && !opened.info.model_fingerprint.empty() &&
      opened.info.model_fingerprint != s_->info.fingerprint) {
    opened.note = "This conversation was held by another model; its memory is rebuilt from text.";
  }
  // Only the index: the blobs are read by restore_memory(), after the text is on screen.
  std::optional<StoredSessionKv> stored = ConversationStore(*s_->db).stored_kv(id);
  s_->conversation = id;
  s_->messages = opened.messages;
  s_->stored = std::move(stored);
  // keeps the cache of the open conversation
  if (!already_open || !same_policy) s_->rebuild_session();
  return opened;
}

void Assistant::rename_conversation(int64_t id, const std::string& name) {
  s_->repo().rename(id, name);
}

void Assistant::delete_conversation(int64_t id) {
  s_->repo().remove(id);
  if (s_->conversation == id) {
    s_->conversation.reset();
    s_->messages.clear();
    s_->stored.reset();
    s_->rebuild_session();
  }
}

int64_t Assistant::export_conversations(const std::vector<int64_t>& ids,
                                        storage::ConversationFileFormat format,
                                        const std::filesystem::path& file) {
  const auto transcripts = ids.empty() ? storage::read_all_transcripts(*s_->db)
                                       : storage::read_transcripts(*s_->db, ids);
  storage::export_conversation_file(transcripts, format, file);
  return static_cast<int64_t>(transcripts.size());
}

std::vector<ConversationInfo> Assistant::import_conversations(const std::filesystem::path& file) {
  std::vector<ConversationInfo> out;
  for (const auto& c : storage::import_conversation_file(*s_->db, file))
    out.push_back(info_of(c));
  return out;
}

std::optional<int64_t> Assistant::current_conversation() const {
  return s_->conversation;
}
std::vector<ConversationMessage> Assistant::messages() const {
  return s_->messages;
}

ReplyStats Assistant::send(const std::string& user_text, const AssistantSampling& sampling,
                           const std::function<void(const std::string&)>& on_text,
                           const TurnProgressFn& on_progress) {
  s_->require_model();
  if (!s_->conversation) new_conversation();
  if (s_->kv_pending) restore_memory();
  const int64_t id = *s_->conversation;
  auto repo = s_->repo();
  // A first message names a conversation that still has the default name.
  if (s_->messages.empty() && repo.load(id).name.rfind(kDefaultName, 0) == 0) {
    std::string title = preview_of(user_text).substr(0, 40);
    while (!title.empty() && title.back() == ' ')
      title.pop_back();
    if (!title.empty()) {
      try {
        repo.rename(id, s_->unique_name(title));
      } catch (const storage::StoreError&) {
        // Keeping the default name is fine.
      }
    }
  }
  // The user's words are stored before generating, so a crash mid-reply cannot lose them.
  const auto first_new = static_cast<int64_t>(s_->messages.size());
  repo.append(id, {0, 0, "user", user_text, 0, 0, 0});
  s_->cancel = false;
  s_->generating = true;
  s_->generating_from_tokens = s_->session->cached_tokens();
  const auto t0 = std::chrono::steady_clock::now();
  ChatReply reply;
  try {
    reply = s_->session->reply(user_text, s_->options(sampling), on_text, on_progress);
  } catch (...) {
    s_->generating = false;
    s_->drop_stored_tail(first_new);
    throw;
  }
  s_->generating = false;
  s_->prefill_cancelled = reply.prefill_cancelled;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  repo.append(id, {0, 0, "assistant", reply.text, 0, 0, 0});
  repo.set_model_fingerprint(id, s_->info.fingerprint);
  s_->messages.push_back({"user", user_text});
  s_->messages.push_back({"assistant", reply.text});
  return s_->stats_of(reply, ms);
}

ReplyStats Assistant::regenerate(const AssistantSampling& sampling,
                                 const std::function<void(const std::string&)>& on_text,
                                 const TurnProgressFn& on_progress) {
  s_->require_model();
  if (!s_->conversation || s_->messages.empty() || s_->messages.back().role != "assistant") {
    throw std::runtime_error("there is no reply to regenerate");
  }
  if (s_->kv_pending) restore_memory();
  s_->cancel = false;
  s_->generating = true;
  s_->generating_from_tokens = s_->session->cached_tokens();
  const auto t0 = std::chrono::steady_clock::now();
  ChatReply reply;
  try {
    reply = s_->session->regenerate(s_->options(sampling), on_text, on_progress);
  } catch (...) {
    s_->generating = false;
    throw;
  }
  s_->generating = false;
  s_->prefill_cancelled = reply.prefill_cancelled;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto last = static_cast<int64_t>(s_->messages.size()) - 1;
  {
    storage::Transaction tx(*s_->db, "conversation " + std::to_string(*s_->conversation));
    s_->drop_stored_tail(last);
    s_->repo().append(*s_->conversation, {0, 0, "assistant", reply.text, 0, 0, 0});
    tx.commit();
  }
  s_->messages.back().text = reply.text;
  return s_->stats_of(reply, ms);
}

void Assistant::stop() {
  s_->cancel = true;
}

MemoryRestore Assistant::restore_memory() {
  MemoryRestore out;
  if (!s_->kv_pending || !s_->session || !s_->conversation) return out;
  s_->kv_pending = false;  // one try per open: a KV that cannot be used is rebuilt from text
  out.attempted = true;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = s_->repo().load(*s_->conversation).name;
  const auto r = ConversationStore(*s_->db).restore(name, *s_->session, /*rebuild=*/false);
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!r) return out;
  if (r->kv_restored) {
    out.restored = true;
    out.tokens = r->cached_tokens;
    out.bytes = s_->session->cache().bytes();
    return out;
  }
  out.damaged = r->rebuild_cause == KvRebuildCause::kDamaged;
  // The stored fingerprint tells another model apart even when its layer count differs (then
  // the store finds no blob for this model's layer range).
  ConversationRestore why = *r;
  if (s_->stored && s_->stored->model_fingerprint != s_->info.fingerprint)
    why.rebuild_cause = KvRebuildCause::kOtherModel;
  out.notice = State::restore_notice(name, why);
  return out;
}

MemorySave Assistant::save_memory() {
  MemorySave out;
  // Nothing computed yet (e.g. a restore that failed and no reply since): the store keeps what
  // it has rather than an empty cache.
  if (!s_->conversation || !s_->session || s_->kv_pending || s_->session->cached_tokens() == 0)
    return out;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!s_->prefill_cancelled) out.completed_tokens = s_->session->prefill_history();
  } catch (const std::out_of_range& e) {
    // The history fills the model's positions: store what is cached, the next turn is refused.
    log::info(std::string("save_memory: cache not completed: ") + e.what());
  }
  const std::string name = s_->repo().load(*s_->conversation).name;
  ConversationStore(*s_->db).save(name, *s_->session);
  s_->read_stored();
  out.tokens = s_->session->cached_tokens();
  out.kv_bytes = s_->stored ? s_->stored->kv_bytes : 0;
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::optional<TurnProgress> Assistant::prepare_memory_step() {
  if (!s_->model || !s_->session || !s_->conversation || s_->kv_pending) return std::nullopt;
  return s_->session->prepare_waiting_episode();
}

MemorySnapshot Assistant::memory() const {
  MemorySnapshot snap;
  snap.conversation_id = s_->conversation.value_or(0);
  if (s_->stored) {
    snap.stored_tokens = s_->stored->tokens;
    snap.stored_kv_bytes = s_->stored->kv_bytes;
    snap.stored_token_id_bytes = s_->stored->token_id_bytes;
    snap.stored_episode_caches = s_->stored->episode_caches;
    snap.stored_episode_kv_bytes = s_->stored->episode_kv_bytes;
  }
  if (!s_->session) {
    for (size_t i = 0; i < s_->messages.size(); ++i) {
      const auto& m = s_->messages[i];
      snap.units.push_back({"utterance", static_cast<int64_t>(i), m.role, preview_of(m.text), 0,
                            MemoryLocation::kNone, 0, 1, "text only"});
    }
    // Without a tokenizer the stored KV cannot be split by message: one unit holds it.
    if (s_->stored) {
      snap.units.push_back({"session", static_cast<int64_t>(s_->messages.size()), "",
                            "(stored KV of the conversation)", s_->stored->tokens,
                            MemoryLocation::kDisk, s_->stored->kv_bytes, 1, "stored"});
      snap.bytes_by_location[static_cast<int>(MemoryLocation::kDisk)] = s_->stored->kv_bytes;
      snap.tokens_by_location[static_cast<int>(MemoryLocation::kDisk)] = s_->stored->tokens;
    }
    return snap;
  }
  const KvCache& cache = s_->session->cache();
  snap.engine_cached_tokens = cache.lengths()[0];
  snap.engine_cache_bytes = cache.bytes();
  snap.engine_device = device_name(cache.device());
  snap.engine_host_layers = cache.host_layers();
  snap.engine_layers = cache.shape().layers;
  const auto& history = s_->session->history();
  if (s_->kv_pending && s_->stored->tokens > 0) {
    s_->add_units(snap, history, s_->stored->tokens, MemoryLocation::kDisk,
                  s_->stored->kv_bytes / s_->stored->tokens, /*on_disk=*/true);
  } else {
    const KvWorkingSet& ws = s_->session->working_set();
    const std::vector<float> presence = ws.attention_share();
    s_->add_units(snap, history, ws.stream_tokens(),
                  cache.device().is_cuda() ? MemoryLocation::kGpu : MemoryLocation::kCpu,
                  s_->info.kv_bytes_per_token, /*on_disk=*/false, &presence,
                  {ws.capture() ? ws.capture_mark() : 0, ws.capture()});
    add_waiting_episodes(snap, *s_->session, s_->info.kv_bytes_per_token);
  }
  return snap;
}

std::vector<MemoryPolicyInfo> Assistant::memory_policies() {
  std::vector<MemoryPolicyInfo> out;
  for (const PolicyDescription& d : policy_catalog())
    out.push_back({d.name, d.summary, d.bounded});
  return out;
}

MemoryPolicyChoice Assistant::default_memory_policy() {
  return {default_policy_spec(), 0};
}

MemoryPolicyChoice Assistant::memory_policy() const {
  return s_->policy;
}

void Assistant::set_memory_policy(const MemoryPolicyChoice& choice) {
  // Checked before anything changes: an unknown name or an impossible budget throws here.
  auto checked = make_policy(choice.spec.empty() ? default_policy_spec() : choice.spec);
  if (s_->model) {
    const int64_t positions = s_->model->config.max_positions;
    (void)effective_budget(
        *checked, choice.kv_budget, positions,
        session_prefill_block(positions, s_->model->decoder->device().is_cuda()));
  } else if (choice.kv_budget < 0) {
    throw std::invalid_argument("the KV budget must not be negative");
  }
  const MemoryPolicyChoice next{checked->spec(), choice.kv_budget};
  if (s_->conversation) s_->repo().set_memory_policy(*s_->conversation, next.spec, next.kv_budget);
  if (next.spec == s_->policy.spec && next.kv_budget == s_->policy.kv_budget) return;
  s_->policy = next;
  s_->stored.reset();  // a working set kept under another policy is rebuilt from the text
  s_->rebuild_session();
}

void Assistant::set_observer(EngineObserver* observer, bool trace) {
  s_->observer = observer;
  s_->trace = trace;
}

}  // namespace engram
