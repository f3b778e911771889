#include "core/engine/batched_decode.h"

#include <algorithm>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "core/runtime/decoder.h"

namespace engram {
namespace {

int64_t room_left(const GenerationState& s) {
  return std::max<int64_t>(0, s.limits().max_new_tokens - static_cast<int64_t>(s.tokens().size()));
}

}  // namespace

BatchedStates::BatchedStates(std::vector<std::shared_ptr<GenerationState>> states,
                             int64_t reserve) {
  rebatch(std::move(states), reserve);
}

BatchedStates::~BatchedStates() {
  // Destroying a batch drops its members' KV (unbatch() first to keep it).
  for (auto& m : members_) {
    if (m->location() == StateLocation::kBatched) m->put_kv(nullptr);
  }
}

int64_t BatchedStates::active_rows() const {
  return std::count_if(members_.begin(), members_.end(), [](const auto& m) { return !m->done(); });
}

int64_t BatchedStates::step(const Decoder& decoder, gpu::DeviceTimeline& timeline,
                            TraceRecorder* trace) {
  if (members_.empty()) return 0;
  const ModelConfig& config = decoder.config();
  const auto b = static_cast<int64_t>(members_.size());
  // One argmax over the rows that choose (a single device-to-host copy per step).
  std::vector<int64_t> choosing;
  std::vector<at::Tensor> logits;
  int64_t limit = 0;
  for (int64_t i = 0; i < b; ++i) {
    const GenerationState& m = *members_[i];
    if (m.done()) continue;
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

  ForwardRequest req;
  req.phase = ForwardPhase::kDecode;
  req.tokens.assign(b, {0});
  req.positions.resize(b);
  std::vector<bool> fed(b, false);
  for (size_t c = 0; c < choosing.size(); ++c) {
    GenerationState& m = *members_[choosing[c]];
    m.accept_token(ids[c], config);
    if (!m.done()) {
      req.tokens[choosing[c]][0] = ids[c];
      fed[choosing[c]] = true;
    }
  }
  const auto count = static_cast<int64_t>(choosing.size());
  if (std::none_of(fed.begin(), fed.end(), [](bool f) { return f; })) return count;
  // Every row advances by one slot, each at its own next position (rows may hold padding); a
  // finished row's slot is filler nobody reads.
  for (int64_t i = 0; i < b; ++i)
    req.positions[i] = {members_[i]->next_position()};
  CacheKvSource source(*kv_);
  const at::Tensor out = decoder.forward(req, source, timeline, trace).logits;  // [B, 1, V]
  for (int64_t i = 0; i < b; ++i) {
    if (!fed[i]) continue;
    members_[i]->set_last_logits(out[i][0]);
    members_[i]->fed_one();
  }
  return count;
}

void BatchedStates::unbatch() {
  for (size_t r = 0; r < members_.size(); ++r) {
    GenerationState& m = *members_[r];
    if (m.done()) {
      m.put_kv(nullptr);
    } else {
      m.put_kv(copy_kv_row(*kv_, static_cast<int64_t>(r), room_left(m), kv_->device()));
    }
  }
  members_.clear();
  kv_.reset();
}

void BatchedStates::rebatch(std::vector<std::shared_ptr<GenerationState>> wanted, int64_t reserve) {
  wanted.erase(
      std::remove_if(wanted.begin(), wanted.end(), [](const auto& s) { return s->done(); }),
      wanted.end());
  if (wanted == members_) return;  // same rows: nothing to copy
  std::vector<KvRowRef> rows;
  for (const auto& w : wanted) {
    const auto here = std::find(members_.begin(), members_.end(), w);
    if (here != members_.end()) {
      rows.push_back({kv_.get(), here - members_.begin()});
    } else {
      if (w->location() != StateLocation::kDevice)
        throw std::logic_error("rebatch: a joining request's KV is not on the device");
      rows.push_back({w->kv(), 0});
    }
  }
  std::unique_ptr<KvCache> next =
      rows.empty() ? nullptr : gather_kv_rows(rows, reserve, rows.front().cache->device());
  // Members that leave: finished ones drop their KV, unfinished ones get their row back.
  for (size_t r = 0; r < members_.size(); ++r) {
    auto& m = members_[r];
    if (std::find(wanted.begin(), wanted.end(), m) != wanted.end()) continue;
    if (m->done()) {
      m->put_kv(nullptr);
    } else {
      m->put_kv(copy_kv_row(*kv_, static_cast<int64_t>(r), room_left(*m), kv_->device()));
    }
  }
  for (const auto& w : wanted) {
    if (w->location() == StateLocation::kDevice) w->take_kv(StateLocation::kBatched);
  }
  members_ = std::move(wanted);
  kv_ = std::move(next);
}

}  // namespace engram
