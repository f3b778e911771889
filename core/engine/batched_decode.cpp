#include "core/engine/batched_decode.h"

#include <algorithm>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "core/runtime/decoder.h"
#include "core/runtime/static_decode_step.h"

namespace engram {
namespace {

int64_t room_left(const GenerationState& s) {
  return std::max<int64_t>(0, s.limits().max_new_tokens - static_cast<int64_t>(s.tokens().size()));
}

// Slots a row must hold for a member with `length` slots of KV: its room to decode (at least
// `reserve`) and a scratch slot.
int64_t slots_needed(int64_t length, const GenerationState& s, int64_t reserve) {
  return length + std::max(reserve, room_left(s)) + 1;
}

int64_t rows_for(int64_t members, at::Device device) {
  // On CUDA a step over 8 rows costs about one over 1
  // (bench/results/2026-11-25-h200-oxygen-graph: 6.7 vs 5.2 ms) and every new row count is a new
  // recording.
  int64_t rows = device.is_cuda() ? 8 : 1;
  while (rows < members)
    rows *= 2;  // powers of two: a batch that grows by one member is rarely re-recorded
  return rows;
}

}  // namespace

BatchedStates::BatchedStates() = default;
BatchedStates::BatchedStates(BatchedStates&&) noexcept = default;
BatchedStates& BatchedStates::operator=(BatchedStates&&) noexcept = default;

BatchedStates::BatchedStates(std::vector<std::shared_ptr<GenerationState>> states,
                             int64_t reserve) {
  rebatch(std::move(states), reserve);
}

BatchedStates::~BatchedStates() {
  // Destroying a batch drops its members' KV (unbatch() first to keep it).
  for (auto& m : slots_) {
    if (m && m->location() == StateLocation::kBatched) m->put_kv(nullptr);
  }
}

std::vector<std::shared_ptr<GenerationState>> BatchedStates::members() const {
  std::vector<std::shared_ptr<GenerationState>> out;
  for (const auto& m : slots_) {
    if (m) out.push_back(m);
  }
  return out;
}

int64_t BatchedStates::rows() const {
  return std::count_if(slots_.begin(), slots_.end(), [](const auto& m) { return m != nullptr; });
}

int64_t BatchedStates::active_rows() const {
  return std::count_if(slots_.begin(), slots_.end(), [](const auto& m) { return m && !m->done(); });
}

int64_t BatchedStates::recordings() const {
  return recorded_step_ ? recorded_step_->recordings() : 0;
}

int64_t BatchedStates::step(const Decoder& decoder, gpu::DeviceTimeline& timeline,
                            TraceRecorder* trace) {
  if (slots_.empty()) return 0;
  const ModelConfig& config = decoder.config();
  const auto b = static_cast<int64_t>(slots_.size());
  // One argmax over the rows that choose (a single device-to-host copy per step).
  std::vector<int64_t> choosing;
  std::vector<at::Tensor> logits;
  int64_t limit = 0;
  for (int64_t i = 0; i < b; ++i) {
    if (!slots_[i] || slots_[i]->done()) continue;
    const GenerationState& m = *slots_[i];
    choosing.push_back(i);
    const int64_t v = m.limits().vocab_limit;
    if (limit == 0 || (v > 0 && v < limit)) limit = v;
    logits.push_back(m.last_logits().view({-1}));
  }
  if (choosing.empty()) return 0;
  at::Tensor stacked = at::stack(logits);  // [rows, vocab]
  if (limit > 0 && limit < stacked.size(1)) stacked = stacked.narrow(1, 0, limit);
  const at::Tensor chosen = stacked.argmax(1).to(at::kCPU);
  const auto* ids = chosen.data_ptr<int64_t>();

  std::vector<int64_t> tokens(b, 0);
  std::vector<bool> fed(b, false);
  for (size_t c = 0; c < choosing.size(); ++c) {
    GenerationState& m = *slots_[choosing[c]];
    m.accept_token(ids[c], config);
    if (!m.done()) {
      tokens[choosing[c]] = ids[c];
      fed[choosing[c]] = true;
    }
  }
  const auto count = static_cast<int64_t>(choosing.size());
  if (std::none_of(fed.begin(), fed.end(), [](bool f) { return f; })) return count;
  // Each fed row at its own next position; a filler row (done or free) at its own length, whose
  // slot it overwrites next time (nobody reads it).
  std::vector<int64_t> positions(b);
  for (int64_t i = 0; i < b; ++i)
    positions[i] = fed[i] ? slots_[i]->next_position() : kv_->lengths()[i];
  at::Tensor out;  // [B, vocab]
  if (records(recorded_, decoder.device()) && !trace) {
    if (!recorded_step_)
      recorded_step_ = std::make_unique<StaticDecodeStep>(decoder, *kv_);
    else if (&recorded_step_->cache() != kv_.get())
      recorded_step_->bind(*kv_);
    out = recorded_step_->step_rows(tokens, positions, fed);
  } else {
    const std::vector<int64_t> lengths = kv_->lengths();
    ForwardRequest req;
    req.phase = ForwardPhase::kDecode;
    req.tokens.resize(b);
    req.positions.resize(b);
    for (int64_t i = 0; i < b; ++i) {
      req.tokens[i] = {tokens[i]};
      req.positions[i] = {positions[i]};
    }
    CacheKvSource source(*kv_);
    out = decoder.forward(req, source, timeline, trace).logits.select(1, 0);
    for (int64_t i = 0; i < b; ++i) {
      if (!fed[i]) kv_->truncate(i, lengths[i]);
    }
  }
  for (int64_t i = 0; i < b; ++i) {
    if (!fed[i]) continue;
    slots_[i]->set_last_logits(out[i]);
    slots_[i]->fed_one();
  }
  return count;
}

void BatchedStates::leave(int64_t row) {
  GenerationState& m = *slots_[row];
  if (m.done()) {
    m.put_kv(nullptr);
  } else {
    // Its logits may be a view of the recorded step's buffer, which the next step overwrites.
    m.set_last_logits(m.last_logits().clone());
    m.put_kv(copy_kv_row(*kv_, row, room_left(m), kv_->device()));
  }
  slots_[row] = nullptr;
  kv_->truncate(row, 0);
}

void BatchedStates::unbatch() {
  for (size_t r = 0; r < slots_.size(); ++r) {
    if (slots_[r]) leave(static_cast<int64_t>(r));
  }
  slots_.clear();
  kv_.reset();
  recorded_step_.reset();
}

void BatchedStates::rebatch(std::vector<std::shared_ptr<GenerationState>> wanted, int64_t reserve) {
  wanted.erase(
      std::remove_if(wanted.begin(), wanted.end(), [](const auto& s) { return s->done(); }),
      wanted.end());
  for (size_t r = 0; r < slots_.size(); ++r) {
    if (slots_[r] && std::find(wanted.begin(), wanted.end(), slots_[r]) == wanted.end())
      leave(static_cast<int64_t>(r));
  }
  std::vector<std::shared_ptr<GenerationState>> joining;
  int64_t need = 0;  // slots every row must hold: the longest member's KV, its room, a scratch
  for (const auto& w : wanted) {
    const auto here = std::find(slots_.begin(), slots_.end(), w);
    int64_t length = 0;
    if (here != slots_.end()) {
      length = kv_->lengths()[here - slots_.begin()];
    } else {
      if (w->location() != StateLocation::kDevice)
        throw std::logic_error("rebatch: a joining request's KV is not on the device");
      joining.push_back(w);
      length = w->kv()->lengths()[0];
    }
    need = std::max(need, slots_needed(length, *w, reserve));
  }
  if (wanted.empty()) {
    unbatch();
    return;
  }
  make_room(static_cast<int64_t>(wanted.size()), static_cast<int64_t>(joining.size()), need,
            kv_ ? *kv_ : *joining.front()->kv());
  for (const auto& w : joining) {
    const int64_t row = free_row();
    kv_->copy_row_from(row, *w->kv(), 0);
    w->take_kv(StateLocation::kBatched);
    slots_[row] = w;
  }
}

int64_t BatchedStates::free_row() const {
  const auto it = std::find(slots_.begin(), slots_.end(), nullptr);
  if (it == slots_.end()) throw std::logic_error("BatchedStates: no free row");
  return it - slots_.begin();
}

void BatchedStates::make_room(int64_t members, int64_t joining, int64_t need, const KvCache& like) {
  const int64_t free_rows = static_cast<int64_t>(slots_.size()) - (members - joining);
  if (!kv_ || free_rows < joining) {
    // More rows: a new cache, the members that stay copied into the same rows.
    const int64_t rows = rows_for(members, like.device());
    auto grown = std::make_unique<KvCache>(
        like.shape(), rows, std::max(recorded_capacity(need), kv_ ? kv_->capacity() : int64_t{0}),
        like.dtype(), like.device());
    for (size_t r = 0; r < slots_.size(); ++r) {
      if (slots_[r]) grown->copy_row_from(static_cast<int64_t>(r), *kv_, static_cast<int64_t>(r));
    }
    slots_.resize(rows);
    kv_ = std::move(grown);
  } else if (kv_->capacity() < need) {
    kv_->ensure_room(recorded_capacity(need) - kv_->max_length());
  }
}

void BatchedStates::spawn(const Decoder& decoder, const KvCache& prefix, int64_t prefix_row,
                          const std::vector<Spawn>& requests, int64_t reserve,
                          gpu::DeviceTimeline& timeline) {
  if (requests.empty()) return;
  for (size_t r = 0; r < slots_.size(); ++r) {  // finished members leave first
    if (slots_[r] && slots_[r]->done()) leave(static_cast<int64_t>(r));
  }
  const int64_t base = prefix.lengths().at(prefix_row);
  const auto joining = static_cast<int64_t>(requests.size());
  int64_t longest = 0;
  for (const Spawn& r : requests) {
    if (r.suffix.empty()) throw std::invalid_argument("BatchedStates::spawn: an empty suffix");
    longest = std::max(longest, static_cast<int64_t>(r.suffix.size()));
  }
  // The new requests alone, one row each holding a copy of the prefix, take their suffixes in one
  // forward (rows of members already decoding would be padding: real work on a CPU); then each
  // row, cut back to its own suffix, moves into a free row of the batch.
  KvCache fresh(prefix.shape(), joining, base + longest, prefix.dtype(), prefix.device());
  ForwardRequest req;
  req.all_logits = true;
  req.tokens.assign(joining, std::vector<int64_t>(longest, 0));
  req.positions.assign(joining, std::vector<int64_t>(longest));
  for (int64_t k = 0; k < joining; ++k) {
    fresh.copy_row_from(k, prefix, prefix_row);
    const std::vector<int64_t>& suffix = requests[k].suffix;
    std::copy(suffix.begin(), suffix.end(), req.tokens[k].begin());
    for (int64_t t = 0; t < longest; ++t)
      req.positions[k][t] = base + t;
  }
  CacheKvSource source(fresh);
  const at::Tensor logits = decoder.forward(req, source, timeline, nullptr).logits;  // [J, T, V]

  int64_t need = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i]) need = std::max(need, slots_needed(kv_->lengths()[i], *slots_[i], reserve));
  }
  for (const Spawn& r : requests) {
    need = std::max(need,
                    slots_needed(base + static_cast<int64_t>(r.suffix.size()), *r.state, reserve));
  }
  make_room(rows() + joining, joining, need, prefix);
  for (int64_t k = 0; k < joining; ++k) {
    const auto n = static_cast<int64_t>(requests[k].suffix.size());
    fresh.truncate(k, base + n);
    const int64_t row = free_row();
    kv_->copy_row_from(row, fresh, k);
    slots_[row] = requests[k].state;
    requests[k].state->prefilled_in_batch(base + n, logits[k][n - 1].clone());
  }
}

}  // namespace engram
