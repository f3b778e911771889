#include "core/engine/conversation_store.h"

#include <bit>
#include <chrono>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/log.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "storage/conversation_repository.h"
#include "storage/kv_blob_store.h"
#include "storage/store_error.h"

namespace engram {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The store's dtype names (storage/records.h); empty for dtypes it does not know.
std::string store_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "fp32";
    case at::kBFloat16:
      return "bf16";
    case at::kHalf:
      return "fp16";
    default:
      return {};
  }
}

storage::KvBlobKey blob_key(int64_t conversation_id, const char* kind, int64_t layers) {
  return {{conversation_id, kind, conversation_id}, 0, static_cast<int32_t>(layers)};
}
constexpr const char* kKvKind = ConversationStore::kUnitKind;
constexpr const char* kIdsKind = "session_token_ids";
// Which stream token each working-set slot holds, uint8 [L or 1, H or 1, slots, 8] (int64
// little-endian); absent when the slots are the stream itself (full KV).
constexpr const char* kSlotsKind = "session_slots";

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
  // The KV holds the working set's slots: every stream token for full KV, fewer under a policy
  // that evicts (a slot map then says which token each slot holds).
  const int64_t stream = ids.layout.shape.empty() ? -1 : ids.layout.shape[0];
  const int64_t tokens = kv.layout.shape.size() == 5 ? kv.layout.shape[3] : -1;
  if (tokens < 0 || tokens > stream)
    return "the stored KV has " + std::to_string(tokens) + " slots for " + std::to_string(stream) +
           " token ids";
  const std::vector<int64_t> want{2, shape.layers, shape.kv_heads, tokens, shape.head_dim};
  if (ids.layout.dtype != "uint8" || ids.layout.shape.size() != 2 || ids.layout.shape[1] != 8)
    return "the token id blob has layout " + ids.layout.dtype + " " + shape_text(ids.layout.shape);
  if (kv.layout.dtype != store_dtype(dtype)) {
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

}  // namespace

ConversationStore::ConversationStore(storage::Database& db) : db_(db) {}

bool ConversationStore::exists(const std::string& name) {
  return storage::ConversationRepository(db_).find_by_name(name).has_value();
}

int64_t ConversationStore::save(const std::string& name, const ChatSession& session) {
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
  if (same < stored.size()) {
    // ConversationRepository has no truncate yet; the table and its key are storage's schema.
    db_.exec("DELETE FROM utterances WHERE conversation_id = " + std::to_string(id) +
                 " AND idx >= " + std::to_string(same),
             "conversation " + std::to_string(id));
  }
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

  // KV and the ids it was computed for, replacing the previous blobs.
  const KvCache& cache = session.cache();
  const KvCacheShape& shape = cache.shape();
  const KvWorkingSet& ws = session.working_set();
  const int64_t tokens = ws.tokens();
  const std::string dtype = store_dtype(cache.dtype());
  if (tokens == 0 || dtype.empty()) {
    if (tokens > 0) {
      log::warn("conversation '" + name + "': KV of dtype " + c10::toString(cache.dtype()) +
                " is not stored; it will be rebuilt from text");
    }
    blobs.remove_unit({id, kKvKind, id});
    blobs.remove_unit({id, kIdsKind, id});
    blobs.remove_unit({id, kSlotsKind, id});
  } else {
    std::vector<at::Tensor> keys, values;
    for (int64_t l = 0; l < shape.layers; ++l) {
      keys.push_back(cache.keys(l)[0].narrow(1, 0, tokens));
      values.push_back(cache.values(l)[0].narrow(1, 0, tokens));
    }
    const at::Tensor kv = at::stack({at::stack(keys), at::stack(values)}).to(at::kCPU).contiguous();
    const at::Tensor positions =
        cache.positions()[0].narrow(0, 0, tokens).to(at::kCPU).contiguous();
    storage::KvLayout kv_layout;
    kv_layout.dtype = dtype;
    kv_layout.shape = {2, shape.layers, shape.kv_heads, tokens, shape.head_dim};
    kv_layout.positions.assign(positions.data_ptr<int64_t>(),
                               positions.data_ptr<int64_t>() + tokens);
    blobs.put(blob_key(id, kKvKind, shape.layers), kv_layout, bytes_of(kv), model.fingerprint);

    // int64 ids as little-endian bytes (x86-64 and aarch64 are little-endian hosts).
    static_assert(std::endian::native == std::endian::little);
    const std::vector<int64_t>& ids = session.cached_ids();
    storage::KvLayout ids_layout{"uint8", {static_cast<int64_t>(ids.size()), 8}, {}};
    blobs.put(blob_key(id, kIdsKind, shape.layers), ids_layout,
              std::as_bytes(std::span<const int64_t>(ids)), model.fingerprint);
    at::Tensor slots = ws.slot_stream();  // [L, H, n]
    const bool identity = static_cast<int64_t>(ids.size()) == tokens && ws.exact_slot() == 0;
    if (identity) {
      blobs.remove_unit({id, kSlotsKind, id});
    } else {
      // One row when every (layer, head) keeps the same tokens (streaming).
      if (slots.eq(slots[0][0].unsqueeze(0).unsqueeze(0)).all().item<bool>())
        slots = slots.narrow(0, 0, 1).narrow(1, 0, 1);
      slots = slots.contiguous();
      storage::KvLayout slots_layout{"uint8", {slots.size(0), slots.size(1), tokens, 8}, {}};
      blobs.put(
          blob_key(id, kSlotsKind, shape.layers), slots_layout,
          {static_cast<const std::byte*>(slots.data_ptr()), static_cast<size_t>(slots.nbytes())},
          model.fingerprint);
    }
  }
  transaction.commit();
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
  const KvCacheShape shape = session.cache().shape();
  const at::ScalarType dtype = session.cache().dtype();
  const at::Device device = session.cache().device();
  storage::KvBlobStore blobs(db_);
  try {
    const auto kv_record = blobs.find(blob_key(conversation->id, kKvKind, shape.layers));
    const auto ids_record = blobs.find(blob_key(conversation->id, kIdsKind, shape.layers));
    if (!kv_record || !ids_record) {
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
        const int64_t tokens = kv_record->layout.shape[3];
        at::Tensor slots;  // [L or 1, H or 1, tokens]
        if (tokens == static_cast<int64_t>(ids.size())) {
          slots = at::arange(tokens, at::kLong).view({1, 1, tokens});
        } else {
          const auto slots_record =
              blobs.find(blob_key(conversation->id, kSlotsKind, shape.layers));
          if (!slots_record || slots_record->layout.shape.size() != 4 ||
              slots_record->layout.shape[2] != tokens) {
            throw std::invalid_argument("the slot map of the stored working set is missing");
          }
          slots = at::empty({slots_record->layout.shape[0], slots_record->layout.shape[1], tokens},
                            at::kLong);
          blobs.get(
              slots_record->key, model.fingerprint,
              {static_cast<std::byte*>(slots.data_ptr()), static_cast<size_t>(slots.nbytes())});
        }
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
        const int64_t stream = static_cast<int64_t>(ids.size());
        session.adopt_working_set(*cache, slots, std::move(ids), stream);
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
  std::optional<storage::KvBlobRecord> kv, ids;
  for (storage::KvBlobRecord& r : storage::KvBlobStore(db_).list(conversation_id)) {
    if (r.key.unit.id != conversation_id) continue;
    if (r.key.unit.kind == kKvKind) {
      kv = std::move(r);
    } else if (r.key.unit.kind == kIdsKind) {
      ids = std::move(r);
    }
  }
  if (!kv || !ids || ids->layout.shape.empty()) return std::nullopt;
  StoredSessionKv out;
  out.tokens = ids->layout.shape[0];
  out.kv_bytes = kv->byte_size;
  out.token_id_bytes = ids->byte_size;
  out.dtype = kv->layout.dtype;
  out.model_fingerprint = kv->model_fingerprint;
  out.kv_file = kv->file_name;
  return out;
}

}  // namespace engram
