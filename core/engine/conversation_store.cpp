#include "core/engine/conversation_store.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/engine/episode_kv_store.h"
#include "core/engine/episode_store.h"
#include "core/log.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/rope_rotate.h"
#include "storage/conversation_repository.h"
#include "storage/kv_blob_store.h"
#include "storage/store_error.h"

namespace engram {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

storage::KvBlobKey blob_key(int64_t conversation_id, const char* kind, int64_t layers) {
  return {{conversation_id, kind, conversation_id}, 0, static_cast<int32_t>(layers)};
}
constexpr const char* kKvKind = ConversationStore::kUnitKind;
constexpr const char* kIdsKind = "session_token_ids";

std::span<const std::byte> bytes_of(const at::Tensor& t) {
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<size_t>(t.nbytes())};
}

// A buffer for a blob read: page-locked when the cache lives on a GPU, so the host-to-device
// copy reads it by DMA.
at::Tensor staging_buffer(int64_t bytes, at::Device device) {
  if (device.is_cuda() && gpu::pinned_memory_available())
    return gpu::empty_pinned({bytes}, at::kByte);
  return at::empty({bytes}, at::kByte);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Why the stored layout cannot go into this session's cache; empty when it fits.
std::string layout_problem(const storage::KvBlobRecord& kv, const storage::KvBlobRecord& ids,
                           const KvCacheShape& shape, at::ScalarType dtype) {
  const int64_t tokens = ids.layout.shape.empty() ? -1 : ids.layout.shape[0];
  const std::vector<int64_t> want{2, shape.layers, shape.kv_heads, tokens, shape.head_dim};
  if (ids.layout.dtype != "uint8" || ids.layout.shape.size() != 2 || ids.layout.shape[1] != 8)
    return "the token id blob has layout " + ids.layout.dtype + " " + shape_text(ids.layout.shape);
  if (kv.layout.dtype != kv_store_dtype(dtype)) {
    return "the stored KV is " + kv.layout.dtype + ", the model runs " + c10::toString(dtype) +
           " (converting would not match a recompute)";
  }
  if (kv.layout.shape != want) {
    return "the stored KV has shape " + shape_text(kv.layout.shape) + ", expected " +
           shape_text(want);
  }
  if (static_cast<int64_t>(kv.layout.positions.size()) != tokens)
    return "the stored KV has " + std::to_string(kv.layout.positions.size()) + " positions";
  return {};
}

constexpr const char* kRunKind = ConversationStore::kRunKind;  // KV of stream tokens [id, id+n)
constexpr const char* kRunIdsKind = "kv_run_ids";              // their token ids, uint8 [n, 8]
constexpr const char* kManifestKind = "kv_manifest";           // slot map; positions = {stored end}

std::span<const std::byte> tensor_bytes(const at::Tensor& t) {
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<size_t>(t.nbytes())};
}

// The runs of a conversation in stream order.
std::vector<storage::KvBlobRecord> list_kind(storage::KvBlobStore& blobs, int64_t id,
                                             const char* kind) {
  std::vector<storage::KvBlobRecord> out;
  for (storage::KvBlobRecord& r : blobs.list(id))
    if (r.key.unit.kind == kind) out.push_back(std::move(r));
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.key.unit.id < b.key.unit.id; });
  return out;
}

int64_t run_tokens(const storage::KvBlobRecord& r) {
  return r.layout.shape.size() == 5 ? r.layout.shape[3] : 0;
}

void put_run(storage::KvBlobStore& blobs, int64_t id, int32_t layers, const std::string& dtype,
             const KvRun& run, const std::vector<int64_t>& stream, const std::string& fingerprint) {
  const int64_t n = run.end - run.begin;
  storage::KvLayout layout;
  layout.dtype = dtype;
  layout.shape.assign(run.kv.sizes().begin(), run.kv.sizes().end());
  layout.positions.assign(run.positions.data_ptr<int64_t>(), run.positions.data_ptr<int64_t>() + n);
  blobs.put({{id, kRunKind, run.begin}, 0, layers}, layout, tensor_bytes(run.kv), fingerprint);
  static_assert(std::endian::native == std::endian::little);
  blobs.put(
      {{id, kRunIdsKind, run.begin}, 0, layers}, {"uint8", {n, 8}, {}},
      std::as_bytes(std::span<const int64_t>(stream.data() + run.begin, static_cast<size_t>(n))),
      fingerprint);
}

// Appends what the store lacks of the session's stream as runs and replaces the manifest, inside
// the caller's transaction: runs past the session's capture mark (a regenerate, a rebuild) are
// removed first, a run across it is cut. Returns the stored end, or -1 when nothing is stored
// (no KV, an unknown dtype, or tokens that left attention before capture was on).
int64_t save_runs(storage::KvBlobStore& blobs, int64_t id, ChatSession& session) {
  const KvWorkingSet& ws = session.working_set();
  const KvCache& cache = ws.cache();
  const auto layers = static_cast<int32_t>(cache.shape().layers);
  const std::string fingerprint = session.model().fingerprint;
  const std::string dtype = kv_store_dtype(cache.dtype());
  const auto drop_all = [&] {
    for (const char* kind : {kRunKind, kRunIdsKind, kManifestKind, kKvKind, kIdsKind})
      for (const auto& r : list_kind(blobs, id, kind))
        blobs.remove(r.key);
  };
  std::vector<KvRun> pending;
  try {
    if (ws.tokens() == 0 || dtype.empty()) throw std::logic_error("nothing to store");
    pending = ws.pending();
  } catch (const std::logic_error& e) {
    if (ws.tokens() > 0)
      log::warn("conversation " + std::to_string(id) + ": KV not stored (" + e.what() +
                "); it will be rebuilt from text");
    drop_all();
    return -1;
  }
  // What the store holds that is still the session's stream.
  const auto manifest = blobs.find({{id, kManifestKind, 0}, 0, layers});
  int64_t valid =
      manifest && !manifest->layout.positions.empty() ? manifest->layout.positions[0] : 0;
  valid = std::min(valid, ws.capture_mark());
  const int64_t first_new = pending.empty() ? ws.stream_tokens() : pending.front().begin;
  if (first_new > valid) valid = -1;  // a gap: the store lost a save; start over below
  if (valid < 0) {
    drop_all();
    return -1;
  }
  for (const auto& legacy : {kKvKind, kIdsKind})
    for (const auto& r : list_kind(blobs, id, legacy))
      blobs.remove(r.key);
  for (const auto& r : list_kind(blobs, id, kRunKind)) {
    const int64_t begin = r.key.unit.id, end = begin + run_tokens(r);
    if (end <= valid) continue;
    // A run across the mark keeps its first part (still the stream's): read it before removing.
    std::optional<storage::KvBlobStore::Blob> old;
    if (begin < valid) old = blobs.get(r.key, fingerprint);
    blobs.remove(r.key);
    blobs.remove({{id, kRunIdsKind, begin}, 0, layers});
    if (old) {
      at::Tensor kv = at::from_blob(old->data.data(), r.layout.shape, cache.dtype())
                          .narrow(3, 0, valid - begin)
                          .contiguous();
      KvRun cut{begin, valid, kv,
                at::tensor(r.layout.positions, at::kLong).narrow(0, 0, valid - begin).contiguous()};
      put_run(blobs, id, layers, dtype, cut, session.cached_ids(), fingerprint);
    }
  }
  // One run per save: the pieces captured before plans and the cached tail are contiguous.
  if (pending.size() > 1) {
    std::vector<at::Tensor> kv, pos;
    for (const KvRun& run : pending) {
      kv.push_back(run.kv);
      pos.push_back(run.positions);
    }
    pending = {KvRun{pending.front().begin, pending.back().end, at::cat(kv, 3), at::cat(pos, 0)}};
  }
  for (const KvRun& run : pending) {
    if (run.end <= valid) continue;
    KvRun part = run;
    if (part.begin < valid) {
      const int64_t skip = valid - part.begin;
      part.kv = part.kv.narrow(3, skip, part.end - valid).contiguous();
      part.positions = part.positions.narrow(0, skip, part.end - valid).contiguous();
      part.begin = valid;
    }
    put_run(blobs, id, layers, dtype, part, session.cached_ids(), fingerprint);
  }
  // The manifest: which stream token each slot holds (one row when all agree), and the end.
  at::Tensor slots = ws.slot_stream();
  if (slots.eq(slots[0][0].unsqueeze(0).unsqueeze(0)).all().item<bool>())
    slots = slots.narrow(0, 0, 1).narrow(1, 0, 1);
  slots = slots.contiguous();
  storage::KvLayout layout{
      "uint8", {slots.size(0), slots.size(1), slots.size(2), 8}, {ws.stream_tokens()}};
  blobs.put({{id, kManifestKind, 0}, 0, layers}, layout, tensor_bytes(slots), fingerprint);
  return ws.stream_tokens();
}

// Restores the working set from runs + manifest: reads every run's ids (the stream) but the KV
// of those runs only that hold a slot (streaming: the sinks' run and the recent ones), gathers
// each (layer, head)'s slots and re-rotates them from their stored positions to 0..n-1. Returns
// the slots installed; throws BlobCorrupt/BlobStale/std::invalid_argument for the caller.
int64_t restore_runs(storage::KvBlobStore& blobs, int64_t id, const storage::KvBlobRecord& manifest,
                     ChatSession& session, int64_t* bytes_read) {
  const KvCacheShape shape = session.cache().shape();
  const at::ScalarType dtype = session.cache().dtype();
  const at::Device device = session.cache().device();
  const std::string& fingerprint = session.model().fingerprint;
  const auto& ms = manifest.layout.shape;
  if (ms.size() != 4 || manifest.layout.positions.size() != 1)
    throw std::invalid_argument("the manifest has an unknown layout");
  const int64_t stream_end = manifest.layout.positions[0];
  at::Tensor map = at::empty({ms[0], ms[1], ms[2]}, at::kLong);
  blobs.get(manifest.key, fingerprint,
            {static_cast<std::byte*>(map.data_ptr()), static_cast<size_t>(map.nbytes())});
  const auto runs = list_kind(blobs, id, kRunKind);
  std::vector<int64_t> stream;
  stream.reserve(static_cast<size_t>(stream_end));
  for (const auto& r : runs) {
    if (r.key.unit.id != static_cast<int64_t>(stream.size()))
      throw std::invalid_argument("the stored runs leave a gap at token " +
                                  std::to_string(stream.size()));
    if (r.layout.dtype != kv_store_dtype(dtype) || r.layout.shape.size() != 5 ||
        r.layout.shape[1] != shape.layers || r.layout.shape[2] != shape.kv_heads ||
        r.layout.shape[4] != shape.head_dim) {
      throw std::invalid_argument(blobs.path_of(r).string() + ": the stored KV is " +
                                  r.layout.dtype + " of another shape than the model's");
    }
    std::vector<int64_t> ids(static_cast<size_t>(run_tokens(r)));
    blobs.get({{id, kRunIdsKind, r.key.unit.id}, 0, r.key.layer_end}, fingerprint,
              std::as_writable_bytes(std::span(ids)));
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  if (static_cast<int64_t>(stream.size()) != stream_end)
    throw std::invalid_argument("the stored runs hold " + std::to_string(stream.size()) +
                                " tokens, the manifest " + std::to_string(stream_end));
  // -1: a slot a ragged plan left empty in that (layer, head); it comes back empty.
  if (map.numel() > 0 &&
      (map.min().item<int64_t>() < -1 || map.max().item<int64_t>() >= stream_end))
    throw std::invalid_argument("the manifest names tokens outside the stream");
  const at::Tensor held = map.ge(0);
  // Only the runs that hold a slot are read; `column` maps a stream token to its place in them.
  at::Tensor needed = at::zeros({stream_end}, at::kBool);
  needed.index_fill_(0, map.index({held}), true);
  at::Tensor column = at::full({stream_end}, -1, at::kLong);
  std::vector<at::Tensor> kv_parts, pos_parts;
  int64_t columns = 0;
  for (const auto& r : runs) {
    const int64_t begin = r.key.unit.id, n = run_tokens(r);
    if (!needed.narrow(0, begin, n).any().item<bool>()) continue;
    at::Tensor kv = staging_buffer(r.byte_size, device);
    blobs.get(r.key, fingerprint,
              {static_cast<std::byte*>(kv.data_ptr()), static_cast<size_t>(kv.nbytes())});
    *bytes_read += r.byte_size;
    kv_parts.push_back(kv.view(dtype).view({2, shape.layers, shape.kv_heads, n, shape.head_dim}));
    pos_parts.push_back(at::tensor(r.layout.positions, at::kLong));
    column.narrow(0, begin, n).copy_(at::arange(columns, columns + n, at::kLong));
    columns += n;
  }
  const int64_t slots = ms[2];
  const at::Tensor all_kv = at::cat(kv_parts, 3).to(device);  // [2, L, H, C, d]
  const at::Tensor all_pos = at::cat(pos_parts, 0);           // [C]
  // An empty slot reads column 0 (any stored KV: it is hidden from attention).
  const at::Tensor cols = column.index({map.clamp_min(0).reshape({-1})})
                              .view(map.sizes())
                              .masked_fill(held.logical_not(), 0)
                              .expand({shape.layers, shape.kv_heads, slots});  // [L, H, n]
  const at::Tensor deltas = at::arange(slots, at::kLong).view({1, 1, slots}) -
                            all_pos.index({cols.reshape({-1})}).view(cols.sizes());
  const at::Tensor freq = session.model().decoder->rope().inverse_frequencies().to(device);
  KvCache cache(shape, 1, std::max<int64_t>(slots, 1), dtype, device);
  const at::Tensor positions =
      at::arange(slots, at::TensorOptions().dtype(at::kLong).device(device)).view({1, slots});
  for (int64_t l = 0; l < shape.layers; ++l) {
    const at::Tensor idx =
        cols[l].to(device).unsqueeze(-1).expand({shape.kv_heads, slots, shape.head_dim});
    at::Tensor k = all_kv[0][l].gather(1, idx).contiguous();  // [H, n, d]
    const at::Tensor v = all_kv[1][l].gather(1, idx);
    for (int64_t h = 0; h < shape.kv_heads; ++h) {
      at::Tensor head = k[h];
      gpu::rope_rotate_(head, deltas[l][h].to(device), freq);
    }
    cache.write(l, k.unsqueeze(0), v.unsqueeze(0), positions);
  }
  std::vector<int64_t> pos(static_cast<size_t>(slots));
  for (int64_t j = 0; j < slots; ++j)
    pos[static_cast<size_t>(j)] = j;
  cache.commit(slots, {pos});
  session.adopt_working_set(cache, map, std::move(stream), stream_end);
  if (device.is_cuda()) gpu::synchronize(device);  // the staging buffers must outlive the copies
  return slots;
}

}  // namespace

ConversationStore::ConversationStore(storage::Database& db) : db_(db) {}

bool ConversationStore::exists(const std::string& name) {
  return storage::ConversationRepository(db_).find_by_name(name).has_value();
}

int64_t ConversationStore::save(const std::string& name, ChatSession& session) {
  const LoadedModel& model = session.model();
  storage::ConversationRepository conversations(db_);
  storage::KvBlobStore blobs(db_);
  storage::Transaction transaction(db_, "conversation '" + name + "'");

  const auto found = conversations.find_by_name(name);
  const int64_t id = found ? found->id : conversations.create(name, model.fingerprint).id;
  if (found && found->model_fingerprint != model.fingerprint)
    conversations.set_model_fingerprint(id, model.fingerprint);

  // Utterances: keep the stored prefix that still matches the history, replace the rest.
  const std::vector<ChatMessage>& messages = session.history();
  const std::vector<storage::Utterance> stored = conversations.utterances(id);
  size_t same = 0;
  while (same < stored.size() && same < messages.size() &&
         stored[same].role == messages[same].role && stored[same].text == messages[same].content) {
    ++same;
  }
  if (same < stored.size()) conversations.truncate(id, static_cast<int64_t>(same));
  int64_t token_end = same > 0 ? stored[same - 1].token_end : 0;
  for (size_t i = same; i < messages.size(); ++i) {
    const std::vector<ChatMessage> prefix(messages.begin(),
                                          messages.begin() + static_cast<std::ptrdiff_t>(i + 1));
    storage::Utterance u;
    u.role = messages[i].role;
    u.text = messages[i].content;
    u.token_begin = token_end;
    token_end = static_cast<int64_t>(
        model.chat_template->encode(*model.tokenizer, prefix, /*add_generation_prompt=*/false)
            .size());
    u.token_end = std::max(token_end, u.token_begin);
    conversations.append(id, std::move(u));
  }

  // KV: append-only runs (only what the store lacks), then the working set's manifest. EpiCache's
  // episodes are stored instead (episode_store.h), each with its cache (episode_kv_store.h).
  session.keep_for_store(true);
  int64_t stored_end = -1;
  last_episode_save_ = {};
  if (const EpisodeRouter* episodes = session.episodes(); episodes && episodes->clustered()) {
    for (const char* kind : {kRunKind, kRunIdsKind, kManifestKind, kKvKind, kIdsKind})
      for (const auto& r : list_kind(blobs, id, kind))
        blobs.remove(r.key);
    save_episodes(db_, id, *episodes, session.embedding_model());
    last_episode_save_ = save_episode_kv(blobs, id, session, episode_rewrite_lag_);
  } else {
    last_episode_save_.blobs_removed = remove_episode_kv(blobs, id);
    stored_end = save_runs(blobs, id, session);
  }
  conversations.set_memory_policy(id, session.policy().spec(), session.policy_choice().kv_budget);
  transaction.commit();
  if (stored_end >= 0) session.working_set().mark_stored(stored_end);
  return id;
}

std::optional<ConversationRestore> ConversationStore::restore(const std::string& name,
                                                              ChatSession& session, bool rebuild) {
  const auto t_open = Clock::now();
  storage::ConversationRepository conversations(db_);
  const auto conversation = conversations.find_by_name(name);
  if (!conversation) return std::nullopt;
  ConversationRestore out;
  out.conversation_id = conversation->id;
  std::vector<ChatMessage> messages;
  for (const storage::Utterance& u : conversations.utterances(conversation->id))
    messages.push_back({u.role, u.text});
  out.utterances = static_cast<int64_t>(messages.size());
  session.set_history(std::move(messages));

  const LoadedModel& model = session.model();
  if (EpisodeRouter* episodes = session.episodes())
    out.episodes_restored =
        restore_episodes(db_, conversation->id, *episodes, session.embedding_model());
  session.keep_for_store(true);  // later turns append what leaves attention
  const KvCacheShape shape = session.cache().shape();
  const at::ScalarType dtype = session.cache().dtype();
  const at::Device device = session.cache().device();
  storage::KvBlobStore blobs(db_);
  if (out.episodes_restored) {
    // EpiCache: each episode's cache, or the reason it is rebuilt when a turn is routed to it.
    const EpisodeKvRestore k = restore_episode_kv(blobs, conversation->id, session);
    const auto episodes = static_cast<int64_t>(session.episodes()->episodes().size());
    // Saved before episode caches were stored: every episode is rebuilt when routed to. Else only
    // those whose stored cache could not be used (an episode no turn had built yet is built when
    // first routed to, as it would have been without the restart).
    const bool none_stored = k.stored == 0;
    out.episode_caches_restored = k.restored;
    out.episode_caches_rebuilt = none_stored ? episodes : static_cast<int64_t>(k.problems.size());
    out.episode_rebuild_reasons = k.problems;
    out.cached_tokens = k.tokens;
    out.kv_bytes_read = k.bytes_read;
    out.open_ms = ms_since(t_open) - k.install_ms;
    out.install_ms = k.install_ms;
    out.kv_restored = out.episode_caches_rebuilt == 0;
    if (!out.kv_restored) {
      out.rebuild_cause = none_stored ? KvRebuildCause::kEpisodic : k.cause;
      std::string why;
      for (const std::string& p : k.problems)
        why += "; " + p;
      out.rebuild_reason = std::to_string(k.restored) + " of " + std::to_string(episodes) +
                           " EpiCache episode caches restored" +
                           (none_stored ? "; none was stored" : why) +
                           "; the others are rebuilt from the text between turns or when a "
                           "turn is first routed to them";
      log::info("conversation '" + name + "': " + out.rebuild_reason);
    }
    return out;
  }
  try {
    const auto manifest =
        blobs.find({{conversation->id, kManifestKind, 0}, 0, static_cast<int32_t>(shape.layers)});
    if (manifest) {
      int64_t bytes = 0;
      out.open_ms = ms_since(t_open);
      const auto t_install = Clock::now();
      restore_runs(blobs, conversation->id, *manifest, session, &bytes);
      out.install_ms = ms_since(t_install);
      out.kv_restored = true;
      out.cached_tokens = session.cached_tokens();
      out.kv_bytes_read = bytes;
    }
    std::optional<storage::KvBlobRecord> kv_record;
    if (!manifest) kv_record = blobs.find(blob_key(conversation->id, kKvKind, shape.layers));
    const auto ids_record = blobs.find(blob_key(conversation->id, kIdsKind, shape.layers));
    if (manifest) {
      // restored from runs above
    } else if (!kv_record || !ids_record) {
      out.rebuild_reason = "no stored KV cache for " + std::to_string(shape.layers) + " layers";
      out.rebuild_cause = KvRebuildCause::kNotStored;
    } else {
      // get() checks the fingerprint before reading a byte (BlobStale) and the checksum while
      // reading (BlobCorrupt).
      std::vector<int64_t> ids(static_cast<size_t>(ids_record->byte_size) / sizeof(int64_t));
      blobs.get(ids_record->key, model.fingerprint, std::as_writable_bytes(std::span(ids)));
      if (const std::string problem = layout_problem(*kv_record, *ids_record, shape, dtype);
          !problem.empty()) {
        out.rebuild_reason = blobs.path_of(*kv_record).string() + ": " + problem;
        out.rebuild_cause = KvRebuildCause::kLayout;
      } else {
        at::Tensor staging = staging_buffer(kv_record->byte_size, device);
        blobs.get(
            kv_record->key, model.fingerprint,
            {static_cast<std::byte*>(staging.data_ptr()), static_cast<size_t>(staging.nbytes())});
        out.open_ms = ms_since(t_open);
        const auto t_install = Clock::now();
        const int64_t tokens = static_cast<int64_t>(ids.size());
        const at::Tensor kv =
            staging.view(dtype).view({2, shape.layers, shape.kv_heads, tokens, shape.head_dim});
        const std::vector<int64_t>& pos = kv_record->layout.positions;
        const at::Tensor positions = at::tensor(pos, at::kLong).view({1, tokens}).to(device);
        auto cache = std::make_unique<KvCache>(shape, 1, tokens + 256, dtype, device);
        for (int64_t l = 0; l < shape.layers; ++l) {
          cache->write(l, kv[0][l].unsqueeze(0).to(device, /*non_blocking=*/true),
                       kv[1][l].unsqueeze(0).to(device, /*non_blocking=*/true), positions);
        }
        cache->commit(tokens, {pos});
        // A whole-session blob (full KV, before append-only runs): the next save writes it as
        // runs.
        session.adopt_working_set(*cache, at::arange(tokens, at::kLong).view({1, 1, tokens}),
                                  std::move(ids), /*stored_from=*/0);
        if (device.is_cuda()) gpu::synchronize(device);  // `staging` must outlive the copies
        out.install_ms = ms_since(t_install);
        out.kv_restored = true;
        out.cached_tokens = tokens;
      }
    }
  } catch (const storage::BlobStale& e) {
    out.rebuild_reason = std::string("the stored KV cache belongs to another model: ") + e.what();
    out.rebuild_cause = KvRebuildCause::kOtherModel;
  } catch (const storage::BlobCorrupt& e) {
    out.rebuild_reason = std::string("the stored KV cache is damaged: ") + e.what();
    out.rebuild_cause = KvRebuildCause::kDamaged;
  } catch (const std::invalid_argument& e) {
    out.rebuild_reason = std::string("the stored KV cache does not fit: ") + e.what();
    out.rebuild_cause = KvRebuildCause::kLayout;
  }
  if (out.open_ms == 0) out.open_ms = ms_since(t_open);
  if (!out.kv_restored && out.rebuild_cause == KvRebuildCause::kNotStored) {
    // Episode caches the episodes could not come back for (another model's window vectors).
    const std::string stored = episode_kv_fingerprint(blobs, conversation->id);
    if (!stored.empty() && stored != model.fingerprint) {
      out.rebuild_cause = KvRebuildCause::kOtherModel;
      out.rebuild_reason =
          "the stored EpiCache episodes and their caches belong to another model (" + stored +
          ", loaded " + model.fingerprint + ")";
    } else if (!stored.empty()) {
      out.rebuild_reason =
          "the stored EpiCache episodes could not be restored; their caches are "
          "not used";
    }
  }
  if (!out.kv_restored) {
    log::info("conversation '" + name + "': " + out.rebuild_reason + "; rebuilding from text");
    if (rebuild) {
      const auto t_rebuild = Clock::now();
      out.prefilled_tokens = session.prefill_history();
      out.rebuild_ms = ms_since(t_rebuild);
    }
  }
  return out;
}

std::optional<StoredSessionKv> ConversationStore::stored_kv(int64_t conversation_id) {
  storage::KvBlobStore blobs(db_);
  std::optional<storage::KvBlobRecord> manifest, legacy_kv, legacy_ids;
  StoredSessionKv out;
  int64_t latest = -1;
  for (storage::KvBlobRecord& r : blobs.list(conversation_id)) {
    const std::string& kind = r.key.unit.kind;
    if (kind == kManifestKind) {
      manifest = r;
    } else if (kind == kRunKind) {
      out.kv_bytes += r.byte_size;
      out.dtype = r.layout.dtype;
      out.model_fingerprint = r.model_fingerprint;
      if (r.key.unit.id > latest) {
        latest = r.key.unit.id;
        out.kv_file = r.file_name;
      }
      ++out.runs;
    } else if (kind == kRunIdsKind) {
      out.token_id_bytes += r.byte_size;
    } else if (kind == "episode_kv" || kind == "episode_kv_state") {
      out.episode_kv_bytes += r.byte_size;
      if (kind == "episode_kv_state") ++out.episode_caches;
      // An EpiCache conversation has no runs: its episodes say which model made its KV.
      if (out.model_fingerprint.empty()) out.model_fingerprint = r.model_fingerprint;
    } else if (kind == kKvKind && r.key.unit.id == conversation_id) {
      legacy_kv = std::move(r);
    } else if (kind == kIdsKind && r.key.unit.id == conversation_id) {
      legacy_ids = std::move(r);
    }
  }
  if (manifest && !manifest->layout.positions.empty() && manifest->layout.shape.size() == 4) {
    out.tokens = manifest->layout.positions[0];
    out.attention_tokens = manifest->layout.shape[2];
    out.manifest_bytes = manifest->byte_size;
    if (out.model_fingerprint.empty()) out.model_fingerprint = manifest->model_fingerprint;
    return out;
  }
  if (!legacy_kv || !legacy_ids || legacy_ids->layout.shape.empty())
    return out.episode_caches > 0 ? std::optional<StoredSessionKv>(out) : std::nullopt;
  StoredSessionKv old;
  old.tokens = legacy_ids->layout.shape[0];
  old.attention_tokens = legacy_kv->layout.shape.size() == 5 ? legacy_kv->layout.shape[3] : 0;
  old.kv_bytes = legacy_kv->byte_size;
  old.token_id_bytes = legacy_ids->byte_size;
  old.dtype = legacy_kv->layout.dtype;
  old.model_fingerprint = legacy_kv->model_fingerprint;
  old.kv_file = legacy_kv->file_name;
  return old;
}

}  // namespace engram
