#include "core/engine/generation_state.h"

#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "core/runtime/decoder.h"
#include "core/runtime/static_decode_step.h"

namespace engram {

GenerationState::GenerationState(int64_t id, std::string task, GenerationLimits limits)
    : id_(id), task_(std::move(task)), limits_(std::move(limits)) {}

void GenerationState::prefill(const Decoder& decoder, std::unique_ptr<KvCache> kv,
                              const std::vector<int64_t>& tokens, gpu::DeviceTimeline& timeline,
                              TraceRecorder* trace) {
  if (tokens.empty()) throw std::invalid_argument("GenerationState::prefill: no tokens");
  if (!kv || kv->batch() != 1) throw std::invalid_argument("GenerationState: a one-row cache");
  kv_ = std::move(kv);
  location_ = StateLocation::kDevice;
  kv_length_ = kv_->lengths()[0];
  const auto n = static_cast<int64_t>(tokens.size());
  ForwardRequest req;
  req.tokens = {tokens};
  req.positions = {std::vector<int64_t>(n)};
  for (int64_t i = 0; i < n; ++i)
    req.positions[0][i] = kv_length_ + i;
  CacheKvSource source(*kv_);
  last_logits_ = decoder.forward(req, source, timeline, trace).logits.view({-1});
  kv_length_ += n;
  prompt_tokens_ = kv_length_;
}

int64_t GenerationState::choose_next(const ModelConfig& config) {
  if (done_) throw std::logic_error("GenerationState::choose_next on a finished request");
  if (!last_logits_.defined()) throw std::logic_error("GenerationState: nothing prefilled");
  at::Tensor logits = last_logits_;
  if (limits_.vocab_limit > 0 && limits_.vocab_limit < logits.size(0))
    logits = logits.narrow(0, 0, limits_.vocab_limit);
  const int64_t token = logits.argmax().item<int64_t>();
  accept_token(token, config);
  return token;
}

void GenerationState::accept_token(int64_t token, const ModelConfig& config) {
  if (done_) throw std::logic_error("GenerationState: a token for a finished request");
  tokens_.push_back(token);
  if (limits_.stop_at_eos && config.is_eos(token)) {
    done_ = true;
    stop_reason_ = "eos";
  } else if (limits_.stop && limits_.stop(*this)) {
    done_ = true;
    stop_reason_ = "stop";
  } else if (static_cast<int64_t>(tokens_.size()) >= limits_.max_new_tokens) {
    done_ = true;
    stop_reason_ = "length";
  }
}

int64_t GenerationState::decode_alone(const Decoder& decoder, int64_t steps,
                                      gpu::DeviceTimeline& timeline, TraceRecorder* trace,
                                      StaticDecodeStep* recorded) {
  if (location_ != StateLocation::kDevice) throw std::logic_error("decode_alone: KV not here");
  if (recorded && &recorded->cache() != kv_.get()) recorded->bind(*kv_);
  int64_t chosen = 0;
  while (chosen < steps && !done_) {
    const int64_t token = choose_next(decoder.config());
    ++chosen;
    if (done_) break;
    if (recorded) {
      last_logits_ = recorded->step(token, kv_length_);
      ++kv_length_;
      continue;
    }
    kv_->ensure_room(1);
    ForwardRequest req;
    req.phase = ForwardPhase::kDecode;
    req.tokens = {{token}};
    req.positions = {{kv_length_}};
    CacheKvSource source(*kv_);
    last_logits_ = decoder.forward(req, source, timeline, trace).logits.view({-1});
    ++kv_length_;
  }
  // The recorded step's logits are its buffer, which its next step (for anyone) overwrites.
  if (recorded && !done_) last_logits_ = last_logits_.clone();
  return chosen;
}

std::unique_ptr<KvCache> gather_kv_rows(const std::vector<KvRowRef>& rows, int64_t reserve,
                                        at::Device device) {
  if (rows.empty()) throw std::invalid_argument("gather_kv_rows: no rows");
  const KvCache& first = *rows.front().cache;
  const KvCacheShape shape = first.shape();
  const auto b = static_cast<int64_t>(rows.size());
  // Each row's filled slots (position >= 0) in slot order: holes of an earlier batch are dropped.
  std::vector<at::Tensor> slots(b);
  std::vector<at::Tensor> positions(b);
  int64_t s = 0;
  for (int64_t i = 0; i < b; ++i) {
    const KvCache& src = *rows[i].cache;
    // Slots past the row's length are not its KV (a waiting row's scratch slot in a batch).
    const at::Tensor pos = src.positions()[rows[i].row].narrow(0, 0, src.lengths()[rows[i].row]);
    slots[i] = pos.ge(0).nonzero().view({-1});
    positions[i] = pos.index_select(0, slots[i]).to(device);
    slots[i] = slots[i].to(src.device());
    s = std::max(s, slots[i].size(0));
  }
  auto kv =
      std::make_unique<KvCache>(shape, b, s + std::max<int64_t>(reserve, 1), first.dtype(), device);
  if (s == 0) return kv;
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor pos = at::full({b, s}, -1, long_opts);
  for (int64_t i = 0; i < b; ++i)
    pos[i].narrow(0, 0, positions[i].size(0)).copy_(positions[i]);
  const auto opts = at::TensorOptions().dtype(first.dtype()).device(device);
  for (int64_t l = 0; l < shape.layers; ++l) {
    // Zeros in the padding: masked slots get probability 0, and 0 x an uninitialised NaN would
    // still poison the row's output.
    at::Tensor keys = at::zeros({b, shape.kv_heads, s, shape.head_dim}, opts);
    at::Tensor values = at::zeros({b, shape.kv_heads, s, shape.head_dim}, opts);
    for (int64_t i = 0; i < b; ++i) {
      const KvCache& src = *rows[i].cache;
      const int64_t n = slots[i].size(0);
      keys[i].narrow(1, 0, n).copy_(src.keys(l)[rows[i].row].index_select(1, slots[i]));
      values[i].narrow(1, 0, n).copy_(src.values(l)[rows[i].row].index_select(1, slots[i]));
    }
    kv->write(l, keys, values, pos);
  }
  const at::Tensor host = pos.to(at::kCPU).contiguous();
  std::vector<std::vector<int64_t>> host_pos(b);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t* p = host[i].data_ptr<int64_t>();
    host_pos[i].assign(p, p + s);
  }
  kv->commit(s, host_pos);
  return kv;
}

std::unique_ptr<KvCache> copy_kv_row(const KvCache& source, int64_t row, int64_t reserve,
                                     at::Device device) {
  return gather_kv_rows({{&source, row}}, reserve, device);
}

void GenerationState::store_to_host() {
  if (location_ == StateLocation::kHost) return;
  if (location_ != StateLocation::kDevice) throw std::logic_error("store_to_host: KV not here");
  if (kv_->device().is_cpu()) {
    location_ = StateLocation::kHost;  // a CPU engine: host memory is where it already is
    return;
  }
  kv_ = copy_kv_row(*kv_, 0, 0, at::kCPU);
  last_logits_ = last_logits_.to(at::kCPU);
  location_ = StateLocation::kHost;
}

void GenerationState::load_to_device(at::Device device) {
  if (location_ == StateLocation::kDevice) return;
  if (location_ != StateLocation::kHost) throw std::logic_error("load_to_device: KV not stored");
  const int64_t room = limits_.max_new_tokens - static_cast<int64_t>(tokens_.size());
  if (kv_->device() != device) {
    kv_ = copy_kv_row(*kv_, 0, room, device);
    last_logits_ = last_logits_.to(device);
  }
  location_ = StateLocation::kDevice;
}

void GenerationState::release_kv() {
  kv_.reset();
  location_ = StateLocation::kReleased;
}

std::unique_ptr<KvCache> GenerationState::take_kv(StateLocation now) {
  if (location_ != StateLocation::kDevice) throw std::logic_error("take_kv: KV not on device");
  location_ = now;
  return std::move(kv_);
}

void GenerationState::prefilled_in_batch(int64_t length, at::Tensor logits) {
  kv_.reset();
  location_ = StateLocation::kBatched;
  kv_length_ = length;
  prompt_tokens_ = length;
  last_logits_ = std::move(logits);
}

void GenerationState::put_kv(std::unique_ptr<KvCache> kv) {
  kv_ = std::move(kv);
  location_ = kv_ ? StateLocation::kDevice : StateLocation::kReleased;
}

}  // namespace engram
