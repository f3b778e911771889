#include "core/engine/episode_kv_store.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <tuple>

#include "storage/store_error.h"
#include "storage/xxh64.h"

namespace engram {
namespace {

static_assert(std::endian::native == std::endian::little);  // the state's words, the KV bytes

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// NOTE: unit kinds and the state's format are on disk: do not change or reuse them.
constexpr const char* kUnitKind = "episode_kv";
constexpr const char* kStateKind = "episode_kv_state";
constexpr int64_t kStateFormat = 1;

int64_t unit_blob_id(int64_t episode, int64_t first_slot) {
  return (episode << 32) | first_slot;
}

storage::KvBlobKey key_of(int64_t conversation_id, const char* kind, int64_t unit, int32_t layers) {
  return {{conversation_id, kind, unit}, 0, layers};
}

std::span<const std::byte> bytes_of(const at::Tensor& t) {
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<size_t>(t.nbytes())};
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// What keeps one episode's cache out of a restore, and its cause.
struct EpisodeProblem : std::runtime_error {
  EpisodeProblem(KvRebuildCause c, const std::string& what) : std::runtime_error(what), cause(c) {}
  KvRebuildCause cause;
};

// One unit as the state lists it.
struct UnitEntry {
  int64_t first_slot = 0;
  int64_t tokens = 0;
  uint64_t checksum = 0;
};

class StateWriter {
 public:
  void word(int64_t v) { append(&v, sizeof v); }
  void append(const void* data, size_t n) {
    const auto* b = static_cast<const std::byte*>(data);
    bytes.insert(bytes.end(), b, b + n);
  }
  std::vector<std::byte> bytes;
};

class StateReader {
 public:
  explicit StateReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  int64_t word() {
    int64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  // A word that must lie in [lowest, highest].
  int64_t word(int64_t lowest, int64_t highest, const char* what) {
    const int64_t v = word();
    if (v < lowest || v > highest) {
      throw EpisodeProblem(KvRebuildCause::kLayout, std::string("the episode's state has ") + what +
                                                        " " + std::to_string(v));
    }
    return v;
  }
  void take(void* data, size_t n) {
    if (n > bytes_.size() - at_)
      throw EpisodeProblem(KvRebuildCause::kLayout, "the episode's state ends early");
    std::memcpy(data, bytes_.data() + at_, n);
    at_ += n;
  }
  at::Tensor tensor(std::vector<int64_t> sizes, at::ScalarType dtype) {
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype));
    take(t.data_ptr(), static_cast<size_t>(t.nbytes()));
    return t;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

std::vector<std::byte> encode_state(const WorkingSetLayout& l, int64_t fed_since_build,
                                    const std::vector<UnitEntry>& units, const KvCacheShape& shape,
                                    const std::vector<at::Tensor>& scores,
                                    const std::vector<int64_t>& ids) {
  StateWriter w;
  w.word(kStateFormat);
  for (int64_t v : {l.tokens, l.exact_slot, l.exact_stream, l.stream_end, l.peak, l.evicted,
                    static_cast<int64_t>(l.ragged), fed_since_build})
    w.word(v);
  w.word(static_cast<int64_t>(units.size()));
  for (const UnitEntry& u : units) {
    w.word(u.first_slot);
    w.word(u.tokens);
    w.word(std::bit_cast<int64_t>(u.checksum));
  }
  if (l.exact_slot > 0) {
    const at::Tensor map = l.compacted.to(at::kCPU, at::kLong).contiguous();
    if (map.sizes() != at::IntArrayRef({shape.layers, shape.kv_heads, l.exact_slot}))
      throw std::logic_error("episode KV: the compacted slot map has another shape");
    w.append(map.data_ptr(), static_cast<size_t>(map.nbytes()));
  }
  w.word(static_cast<int64_t>(scores.size()));
  for (const at::Tensor& s : scores) {
    if (!s.defined()) {
      w.word(-1);
      w.word(-1);
      continue;
    }
    const at::Tensor host = s.to(at::kCPU, at::kFloat).contiguous();  // [kv_heads, slots]
    w.word(host.size(0));
    w.word(host.size(1));
    w.append(host.data_ptr(), static_cast<size_t>(host.nbytes()));
  }
  w.word(static_cast<int64_t>(ids.size()));
  w.append(ids.data(), ids.size() * sizeof(int64_t));
  return std::move(w.bytes);
}

struct DecodedState {
  RestoredEpisodeKv kv;
  std::vector<UnitEntry> units;
};

DecodedState decode_state(std::span<const std::byte> bytes, const KvCacheShape& shape,
                          int64_t capacity) {
  constexpr int64_t kMost = int64_t{1} << 40;
  StateReader r(bytes);
  DecodedState d;
  if (const int64_t format = r.word(); format != kStateFormat) {
    throw EpisodeProblem(KvRebuildCause::kLayout, "the episode's state has format " +
                                                      std::to_string(format) +
                                                      "; this Engram reads format 1");
  }
  WorkingSetLayout& l = d.kv.layout;
  l.tokens = r.word(1, capacity, "a working set of");
  l.exact_slot = r.word(0, l.tokens, "an exact slot of");
  l.exact_stream = r.word(0, kMost, "an exact stream token of");
  l.stream_end = r.word(l.exact_stream, kMost, "a stream of");
  // Slots [exact_slot, tokens) hold the stream's last tokens verbatim.
  if (l.stream_end - l.exact_stream != l.tokens - l.exact_slot)
    throw EpisodeProblem(KvRebuildCause::kLayout, "the episode's verbatim tail does not add up");
  l.peak = r.word(0, kMost, "a peak of");
  l.evicted = r.word(0, kMost, "evicted tokens");
  l.ragged = r.word(0, 1, "a ragged flag") == 1;
  d.kv.fed_since_build = r.word(0, kMost, "fed tokens");
  const int64_t n_units = r.word(1, l.tokens, "units");
  int64_t slot = 0;
  for (int64_t i = 0; i < n_units; ++i) {
    UnitEntry u;
    u.first_slot = r.word(slot, slot, "a unit at slot");
    u.tokens = r.word(1, l.tokens - slot, "a unit of");
    u.checksum = std::bit_cast<uint64_t>(r.word());
    slot += u.tokens;
    d.units.push_back(u);
  }
  if (slot != l.tokens)
    throw EpisodeProblem(KvRebuildCause::kLayout, "the episode's units do not cover its slots");
  if (l.exact_slot > 0) {
    l.compacted = r.tensor({shape.layers, shape.kv_heads, l.exact_slot}, at::kLong);
    if (l.compacted.min().item<int64_t>() < -1 ||
        l.compacted.max().item<int64_t>() >= l.exact_stream) {
      throw EpisodeProblem(KvRebuildCause::kLayout,
                           "the episode's slot map names tokens outside its stream");
    }
  }
  const int64_t scored_layers = r.word(0, shape.layers, "scores for layers:");
  for (int64_t i = 0; i < scored_layers; ++i) {
    const int64_t heads = r.word(-1, shape.kv_heads, "scores for heads:");
    const int64_t slots = r.word(-1, capacity, "scores for slots:");
    if (heads < 0 || slots < 0) {
      d.kv.scores.emplace_back();
      continue;
    }
    if (heads != shape.kv_heads)
      throw EpisodeProblem(KvRebuildCause::kLayout, "the episode's scores have other heads");
    d.kv.scores.push_back(r.tensor({heads, slots}, at::kFloat));
  }
  const int64_t ids = r.word(l.stream_end, l.stream_end, "stream ids:");
  d.kv.ids.resize(static_cast<size_t>(ids));
  r.take(d.kv.ids.data(), d.kv.ids.size() * sizeof(int64_t));
  if (!r.done()) throw EpisodeProblem(KvRebuildCause::kLayout, "the episode's state is too long");
  return d;
}

// An episode's stored version that a restore could still use for the session's current episode:
// its state decodes, its stream is a prefix of the episode's stream now, and every unit it names
// is stored with its checksum, the session's dtype and shape, and a file of the row's size (a
// truncated file is not kept; one damaged in place is refused by the restore and replaced once
// the episode has grown by the lag). Its stream length and unit blob ids; std::nullopt otherwise.
struct StoredVersion {
  int64_t stream = 0;
  std::vector<int64_t> unit_ids;
};
std::optional<StoredVersion> stored_version(storage::KvBlobStore& blobs, int64_t conversation_id,
                                            int32_t episode, const KvCacheShape& shape,
                                            const std::string& dtype, int64_t capacity,
                                            const std::string& fingerprint,
                                            const std::vector<int64_t>& ids) {
  const auto layers = static_cast<int32_t>(shape.layers);
  const storage::KvBlobKey state_key = key_of(conversation_id, kStateKind, episode, layers);
  const auto row = blobs.find(state_key);
  if (!row || row->model_fingerprint != fingerprint) return std::nullopt;
  try {
    const storage::KvBlobStore::Blob blob = blobs.get(state_key, fingerprint);
    const DecodedState d = decode_state(blob.data, shape, capacity);
    if (d.kv.ids.size() > ids.size() || !std::equal(d.kv.ids.begin(), d.kv.ids.end(), ids.begin()))
      return std::nullopt;
    StoredVersion v;
    v.stream = static_cast<int64_t>(d.kv.ids.size());
    for (const UnitEntry& u : d.units) {
      const int64_t id = unit_blob_id(episode, u.first_slot);
      const auto unit = blobs.find(key_of(conversation_id, kUnitKind, id, layers));
      const std::vector<int64_t> want{shape.layers, 2, shape.kv_heads, u.tokens, shape.head_dim};
      if (!unit || unit->checksum != u.checksum || unit->layout.dtype != dtype ||
          unit->layout.shape != want)
        return std::nullopt;
      std::error_code error;
      const auto size = std::filesystem::file_size(blobs.path_of(*unit), error);
      if (error || static_cast<int64_t>(size) != unit->byte_size) return std::nullopt;
      v.unit_ids.push_back(id);
    }
    return v;
  } catch (const std::exception&) {  // damaged, another format: write the episode anew
    return std::nullopt;
  }
}

}  // namespace

std::string kv_store_dtype(at::ScalarType dtype) {
  switch (dtype) {
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

EpisodeKvSave save_episode_kv(storage::KvBlobStore& blobs, int64_t conversation_id,
                              ChatSession& session, int64_t rewrite_lag_tokens) {
  EpisodeKvSave out;
  const KvCacheShape shape = session.cache().shape();
  const auto layers = static_cast<int32_t>(shape.layers);
  const std::string dtype = kv_store_dtype(session.cache().dtype());
  const std::string& fingerprint = session.model().fingerprint;
  const EpisodeRouter* router = session.episodes();
  std::set<std::tuple<std::string, int64_t>> keep;
  EpisodeKvPool* pool = dtype.empty() || !router ? nullptr : session.checkpoint_episode_kv();
  for (int32_t e : pool ? pool->episodes() : std::vector<int32_t>{}) {
    if (static_cast<size_t>(e) >= router->episodes().size()) continue;
    const KvUnitPool& units = pool->units();
    // Per unit (slot order): the checksum it is stored under when the store holds it already,
    // i.e. its row is the blob it was written to (not after a rolled-back save, nor in another
    // conversation); and the tokens of the units the store lacks.
    const std::vector<int64_t>& unit_ids = pool->episode_units(e);
    std::vector<std::optional<uint64_t>> held;
    int64_t missing = 0, slot = 0;
    for (int64_t u : unit_ids) {
      const KvUnit& unit = units.unit(u);
      const std::optional<uint64_t> tag = pool->persisted(u);
      const auto row =
          tag ? blobs.find(key_of(conversation_id, kUnitKind, unit_blob_id(e, slot), layers))
              : std::nullopt;
      const bool stored = row && row->checksum == *tag && row->model_fingerprint == fingerprint &&
                          row->layout.shape.size() == 5 && row->layout.shape[3] == unit.tokens;
      held.push_back(stored ? tag : std::nullopt);
      if (!stored) missing += unit.tokens;
      slot += unit.tokens;
    }
    // Lacking more tokens than the episode grew by means a replan rewrote it (a shrink
    // re-rotates every kept key). While it grew by less than the allowed lag since a stored
    // version, that version stays: a restore catches the difference up as for an episode that
    // missed turns, and a chat does not write the whole working set per reply.
    if (rewrite_lag_tokens > 0 && missing > 0) {
      const std::vector<int64_t>& ids = session.episode_ids(e);
      const auto stored =
          stored_version(blobs, conversation_id, e, shape, dtype,
                         session.working_set().cache().capacity(), fingerprint, ids);
      const int64_t grown = stored ? static_cast<int64_t>(ids.size()) - stored->stream : 0;
      if (stored && missing > grown && grown < rewrite_lag_tokens) {
        for (int64_t id : stored->unit_ids)
          keep.insert({kUnitKind, id});
        keep.insert({kStateKind, e});
        ++out.episodes;
        ++out.episodes_deferred;
        out.tokens_behind += grown;
        continue;
      }
    }
    std::vector<UnitEntry> entries;
    slot = 0;
    for (size_t i = 0; i < unit_ids.size(); ++i) {
      const int64_t u = unit_ids[i];
      const KvUnit& unit = units.unit(u);
      const storage::KvBlobKey key =
          key_of(conversation_id, kUnitKind, unit_blob_id(e, slot), layers);
      uint64_t checksum = 0;
      if (held[i]) {
        checksum = *held[i];
        ++out.units_kept;
      } else {
        const at::Tensor kv = units.read(u);  // [L, 2, H, n, d] on the CPU
        const storage::KvLayout layout{
            dtype, std::vector<int64_t>(kv.sizes().begin(), kv.sizes().end()), unit.positions};
        const storage::KvBlobRecord written = blobs.put(key, layout, bytes_of(kv), fingerprint);
        pool->set_persisted(u, written.checksum);
        checksum = written.checksum;
        ++out.units_written;
        out.kv_bytes_written += written.byte_size;
      }
      entries.push_back({slot, unit.tokens, checksum});
      keep.insert({kUnitKind, key.unit.id});
      slot += unit.tokens;
    }
    const std::vector<std::byte> state =
        encode_state(pool->episode_layout(e), router->episodes()[e].fed_since_build, entries, shape,
                     session.episode_scores(e), session.episode_ids(e));
    const storage::KvBlobKey state_key = key_of(conversation_id, kStateKind, e, layers);
    const auto row = blobs.find(state_key);
    if (!row || row->byte_size != static_cast<int64_t>(state.size()) ||
        row->checksum != storage::xxh64(state) || row->model_fingerprint != fingerprint) {
      blobs.put(state_key, {"uint8", {static_cast<int64_t>(state.size())}, {}}, state, fingerprint);
      ++out.states_written;
      out.state_bytes_written += static_cast<int64_t>(state.size());
    }
    keep.insert({kStateKind, e});
    ++out.episodes;
  }
  for (const storage::KvBlobRecord& r : blobs.list(conversation_id)) {
    const std::string& kind = r.key.unit.kind;
    if (kind != kUnitKind && kind != kStateKind) continue;
    if (r.key.layer_begin == 0 && r.key.layer_end == layers && keep.count({kind, r.key.unit.id}))
      continue;
    blobs.remove(r.key);
    ++out.blobs_removed;
  }
  return out;
}

EpisodeKvRestore restore_episode_kv(storage::KvBlobStore& blobs, int64_t conversation_id,
                                    ChatSession& session) {
  EpisodeKvRestore out;
  const auto t_read = Clock::now();
  const KvCacheShape shape = session.cache().shape();
  const auto layers = static_cast<int32_t>(shape.layers);
  const at::ScalarType dtype = session.cache().dtype();
  const int64_t capacity = session.working_set().cache().capacity();
  const std::string& fingerprint = session.model().fingerprint;
  const auto problem = [&](int64_t episode, KvRebuildCause cause, const std::string& what) {
    if (out.problems.empty()) out.cause = cause;
    out.problems.push_back("episode " + std::to_string(episode) + ": " + what);
  };
  std::vector<storage::KvBlobRecord> states;
  for (storage::KvBlobRecord& r : blobs.list(conversation_id))
    if (r.key.unit.kind == kStateKind) states.push_back(std::move(r));
  std::sort(states.begin(), states.end(),
            [](const auto& a, const auto& b) { return a.key.unit.id < b.key.unit.id; });
  std::vector<RestoredEpisodeKv> found;
  for (const storage::KvBlobRecord& state : states) {
    const int64_t e = state.key.unit.id;
    ++out.stored;
    try {
      if (state.key.layer_begin != 0 || state.key.layer_end != layers) {
        throw EpisodeProblem(KvRebuildCause::kLayout,
                             "stored for layers [" + std::to_string(state.key.layer_begin) + ", " +
                                 std::to_string(state.key.layer_end) + "), the model has " +
                                 std::to_string(layers));
      }
      // get() checks the fingerprint before reading a byte (BlobStale), the checksum while
      // reading (BlobCorrupt).
      const storage::KvBlobStore::Blob blob = blobs.get(state.key, fingerprint);
      DecodedState d = decode_state(blob.data, shape, capacity);
      d.kv.episode = static_cast<int32_t>(e);
      int64_t bytes = 0;
      for (const UnitEntry& u : d.units) {
        const storage::KvBlobKey key =
            key_of(conversation_id, kUnitKind, unit_blob_id(e, u.first_slot), layers);
        const std::string slots = "slots [" + std::to_string(u.first_slot) + ", " +
                                  std::to_string(u.first_slot + u.tokens) + ")";
        const auto row = blobs.find(key);
        if (!row)
          throw EpisodeProblem(KvRebuildCause::kDamaged, "the blob of " + slots + " is missing");
        const std::string file = blobs.path_of(*row).string();
        if (row->checksum != u.checksum) {
          throw EpisodeProblem(KvRebuildCause::kDamaged,
                               file + ": not the blob of " + slots + " the episode's state names");
        }
        if (row->layout.dtype != kv_store_dtype(dtype)) {
          throw EpisodeProblem(KvRebuildCause::kLayout,
                               file + ": the stored KV is " + row->layout.dtype +
                                   ", the model runs " + c10::toString(dtype) +
                                   " (converting would not match a recompute)");
        }
        const std::vector<int64_t> want{shape.layers, 2, shape.kv_heads, u.tokens, shape.head_dim};
        if (row->layout.shape != want ||
            static_cast<int64_t>(row->layout.positions.size()) != u.tokens) {
          throw EpisodeProblem(KvRebuildCause::kLayout, file + ": the stored KV has shape " +
                                                            shape_text(row->layout.shape) +
                                                            ", expected " + shape_text(want));
        }
        at::Tensor kv = at::empty(want, at::TensorOptions().dtype(dtype));
        blobs.get(key, fingerprint,
                  {static_cast<std::byte*>(kv.data_ptr()), static_cast<size_t>(kv.nbytes())});
        bytes += row->byte_size;
        d.kv.units.push_back({kv, row->layout.positions, row->checksum});
      }
      out.bytes_read += bytes + state.byte_size;
      found.push_back(std::move(d.kv));
    } catch (const storage::BlobStale& x) {
      problem(e, KvRebuildCause::kOtherModel,
              std::string("the stored cache belongs to another model: ") + x.what());
    } catch (const storage::BlobCorrupt& x) {
      problem(e, KvRebuildCause::kDamaged, std::string("the stored cache is damaged: ") + x.what());
    } catch (const EpisodeProblem& x) {
      problem(e, x.cause, x.what());
    }
  }
  out.read_ms = ms_since(t_read);
  const auto t_install = Clock::now();
  std::vector<int32_t> episodes;
  std::vector<int64_t> tokens;
  for (const RestoredEpisodeKv& r : found) {
    episodes.push_back(r.episode);
    tokens.push_back(r.layout.tokens);
  }
  const std::vector<std::string> refused = session.adopt_episode_kv(std::move(found));
  for (size_t i = 0; i < refused.size(); ++i) {
    if (!refused[i].empty()) {
      problem(episodes[i], KvRebuildCause::kLayout, refused[i]);
      continue;
    }
    ++out.restored;
    out.tokens += tokens[i];
  }
  out.install_ms = ms_since(t_install);
  return out;
}

int64_t remove_episode_kv(storage::KvBlobStore& blobs, int64_t conversation_id) {
  int64_t removed = 0;
  for (const storage::KvBlobRecord& r : blobs.list(conversation_id)) {
    if (r.key.unit.kind != kUnitKind && r.key.unit.kind != kStateKind) continue;
    blobs.remove(r.key);
    ++removed;
  }
  return removed;
}

std::string episode_kv_fingerprint(storage::KvBlobStore& blobs, int64_t conversation_id) {
  for (const storage::KvBlobRecord& r : blobs.list(conversation_id))
    if (r.key.unit.kind == kStateKind) return r.model_fingerprint;
  return {};
}

}  // namespace engram
