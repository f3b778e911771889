#include "core/kv/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpu/device_timeline.h"
#include "gpu/rope_rotate.h"

namespace engram {

namespace {
bool all_equal(const std::vector<int64_t>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}
}  // namespace

KvCache::KvCache(KvCacheShape shape, int64_t batch, int64_t capacity, at::ScalarType dtype,
                 at::Device device)
    : shape_(shape),
      batch_(batch),
      capacity_(std::max<int64_t>(capacity, 1)),
      dtype_(dtype),
      device_(device),
      lengths_(batch, 0) {
  for (int64_t l = 0; l < shape.layers; ++l) {
    keys_.push_back(zeroed_storage(capacity_));
    values_.push_back(zeroed_storage(capacity_));
  }
  positions_ =
      at::full({batch, capacity_}, -1, at::TensorOptions().dtype(at::kLong).device(device));
}

void KvCache::move_layers_to_host(const std::vector<int64_t>& layers) {
  stage_layers_to_host(layers);
  use_staged_layers();
}

void KvCache::stage_layers_to_host(const std::vector<int64_t>& layers) {
  for (int64_t l : begin_staging(layers))
    stage_layer(l);
}

std::vector<int64_t> KvCache::begin_staging(const std::vector<int64_t>& layers) {
  std::vector<int64_t> moving;
  for (int64_t l : layers) {
    if (l < 0 || l >= shape_.layers)
      throw std::out_of_range("KvCache: no layer " + std::to_string(l) + " to move to the host");
    if (std::find(host_layer_ids_.begin(), host_layer_ids_.end(), l) == host_layer_ids_.end() &&
        std::find(moving.begin(), moving.end(), l) == moving.end())
      moving.push_back(l);
  }
  staged_layer_ids_.clear();
  staged_slab_ = at::Tensor();
  if (moving.empty()) return moving;
  // One slab for every moved layer: a pinned allocation per layer would round each up to a power
  // of two in PyTorch's host allocator.
  const auto n = static_cast<int64_t>(moving.size());
  staged_slab_ =
      gpu::empty_pinned({2, n, batch_, shape_.kv_heads, capacity_, shape_.head_dim}, dtype_);
  staged_layer_ids_ = moving;
  return moving;
}

void KvCache::stage_layer(int64_t layer) {
  const auto at = std::find(staged_layer_ids_.begin(), staged_layer_ids_.end(), layer);
  if (at == staged_layer_ids_.end())
    throw std::logic_error("KvCache: layer " + std::to_string(layer) + " is not being staged");
  const auto row = static_cast<int64_t>(at - staged_layer_ids_.begin());
  const auto l = static_cast<size_t>(layer);
  staged_slab_[0][row].copy_(keys_[l], /*non_blocking=*/true);
  staged_slab_[1][row].copy_(values_[l], /*non_blocking=*/true);
}

void KvCache::drop_staged() {
  staged_layer_ids_.clear();
  staged_slab_ = at::Tensor();
}

void KvCache::use_staged_layers() {
  if (staged_layer_ids_.empty()) return;
  // Layers moved earlier come back first: one slab holds every moved layer.
  if (!host_layer_ids_.empty()) {
    std::vector<int64_t> all = host_layer_ids_;
    all.insert(all.end(), staged_layer_ids_.begin(), staged_layer_ids_.end());
    restore_layers();
    move_layers_to_host(all);
    return;
  }
  for (size_t i = 0; i < staged_layer_ids_.size(); ++i) {
    const auto l = static_cast<size_t>(staged_layer_ids_[i]);
    const auto row = static_cast<int64_t>(i);
    // The device storage is released here; its reuse is ordered after the copies that read it.
    keys_[l] = gpu::device_view_of_pinned(staged_slab_[0][row], device_);
    values_[l] = gpu::device_view_of_pinned(staged_slab_[1][row], device_);
  }
  host_layer_ids_ = std::move(staged_layer_ids_);
  host_slab_ = staged_slab_;
  staged_layer_ids_.clear();
  staged_slab_ = at::Tensor();
  ++storage_version_;
}

void KvCache::restore_layers() {
  if (host_layer_ids_.empty()) return;
  for (size_t i = 0; i < host_layer_ids_.size(); ++i) {
    const auto l = static_cast<size_t>(host_layer_ids_[i]);
    const auto row = static_cast<int64_t>(i);
    for (int64_t kv = 0; kv < 2; ++kv) {
      at::Tensor back =
          at::empty(host_slab_[kv][row].sizes(), at::TensorOptions().dtype(dtype_).device(device_));
      back.copy_(host_slab_[kv][row], /*non_blocking=*/true);
      (kv == 0 ? keys_ : values_)[l] = back;
    }
  }
  host_layer_ids_.clear();
  host_slab_ = at::Tensor();
  ++storage_version_;
}

int64_t KvCache::host_layers() const {
  return static_cast<int64_t>(host_layer_ids_.size());
}

at::Tensor KvCache::zeroed_storage(int64_t capacity) const {
  // Zeros, not empty: masked slots (position -1, ragged rows, a working set's free capacity) are
  // still read by attention with probability 0, and 0 x NaN from stale memory would be NaN.
  const std::vector<int64_t> shape{batch_, shape_.kv_heads, capacity, shape_.head_dim};
  return at::zeros(shape, at::TensorOptions().dtype(dtype_).device(device_));
}

int64_t KvCache::max_length() const {
  return lengths_.empty() ? 0 : *std::max_element(lengths_.begin(), lengths_.end());
}

void KvCache::ensure_room(int64_t tokens) {
  const int64_t need = max_length() + tokens;
  if (need <= capacity_) return;
  restore_layers();
  // Grow geometrically so that token-by-token decode copies O(log n) times, to a multiple of 64
  // slots: cuBLAS takes its vectorised bf16 kernels only for aligned leading dimensions, and the
  // recorded decode step's attention reads the whole capacity (an odd capacity of 30,018 slots
  // decoded an 8B shape at 16 ms/token where 20,064 ran at 7.5).
  const int64_t grown = (std::max(need, capacity_ + capacity_ / 2) + 63) / 64 * 64;
  const int64_t used = max_length();
  for (int64_t l = 0; l < shape_.layers; ++l) {
    for (auto* t : {&keys_[l], &values_[l]}) {
      at::Tensor bigger = zeroed_storage(grown);
      bigger.narrow(2, 0, used).copy_(t->narrow(2, 0, used));
      *t = bigger;
    }
  }
  at::Tensor pos = at::full({batch_, grown}, -1, positions_.options());
  pos.narrow(1, 0, used).copy_(positions_.narrow(1, 0, used));
  positions_ = pos;
  if (key_valid_.defined()) {
    at::Tensor valid =
        at::ones({shape_.layers, batch_, shape_.kv_heads, grown}, key_valid_.options());
    valid.narrow(3, 0, used).copy_(key_valid_.narrow(3, 0, used));
    key_valid_ = valid;
  }
  capacity_ = grown;
  ++storage_version_;
}

void KvCache::set_key_valid(const at::Tensor& valid) {
  if (!valid.defined()) {
    key_valid_ = at::Tensor();
    key_valid_suffix_ = true;
    return;
  }
  const int64_t n = valid.size(-1);
  if (batch_ != 1 || valid.dim() != 3 || valid.size(0) != shape_.layers ||
      valid.size(1) != shape_.kv_heads || n > capacity_) {
    throw std::invalid_argument(
        "KvCache::set_key_valid: [layers, kv_heads, n <= capacity] for one row");
  }
  // Written in place once allocated: a recorded decode step keeps reading the same storage.
  if (!key_valid_.defined()) {
    key_valid_ = at::ones({shape_.layers, 1, shape_.kv_heads, capacity_},
                          at::TensorOptions().dtype(at::kBool).device(device_));
  }
  key_valid_.fill_(true);
  key_valid_.select(1, 0).narrow(2, 0, n).copy_(valid);
  // Later slots are valid, so a suffix of the first n stays one as tokens are appended.
  key_valid_suffix_ =
      n < 2 || valid.narrow(2, 1, n - 1).ge(valid.narrow(2, 0, n - 1)).all().item<bool>();
}

at::Tensor KvCache::write_slots(int64_t tokens) const {
  std::vector<int64_t> slots;
  slots.reserve(batch_ * tokens);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t s = 0; s < tokens; ++s)
      slots.push_back(lengths_[b] + s);
  }
  return at::tensor(slots, at::kLong).view({batch_, tokens}).to(device_);
}

void KvCache::write(int64_t layer, const at::Tensor& keys, const at::Tensor& values,
                    const at::Tensor& positions) {
  const int64_t tokens = keys.size(2);
  if (keys.size(0) != batch_ || max_length() + tokens > capacity_) {
    throw std::logic_error("KvCache::write: batch mismatch or no room (call ensure_room)");
  }
  if (all_equal(lengths_)) {
    const int64_t at_len = lengths_.empty() ? 0 : lengths_[0];
    keys_[layer].narrow(2, at_len, tokens).copy_(keys);
    values_[layer].narrow(2, at_len, tokens).copy_(values);
    if (layer == 0) positions_.narrow(1, at_len, tokens).copy_(positions);
    return;
  }
  // Ragged rows: scatter each row's tokens at its own length.
  const at::Tensor slots = write_slots(tokens);  // [B, S]
  const at::Tensor rows =
      at::arange(batch_, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(1);
  using at::indexing::Slice;
  keys_[layer].index_put_({rows, Slice(), slots}, keys.permute({0, 2, 1, 3}));
  values_[layer].index_put_({rows, Slice(), slots}, values.permute({0, 2, 1, 3}));
  if (layer == 0) positions_.index_put_({rows, slots}, positions);
}

void KvCache::commit(int64_t tokens, const std::vector<std::vector<int64_t>>& positions) {
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t s = 0; s < tokens; ++s) {
      if (positions[b][s] != lengths_[b] + s) dense_ = false;
    }
    lengths_[b] += tokens;
  }
  if (!all_equal(lengths_)) dense_ = false;
}

void KvCache::commit_row(int64_t row, int64_t position) {
  if (position != lengths_.at(row)) dense_ = false;
  ++lengths_[row];
  if (!all_equal(lengths_)) dense_ = false;
}

int64_t KvCache::claim(const std::vector<int64_t>& positions, int64_t spare) {
  if (batch_ != 1) throw std::logic_error("KvCache::claim: one-row caches only");
  const int64_t n = static_cast<int64_t>(positions.size());
  ensure_room(n + spare);
  const int64_t first = lengths_[0];
  if (n > 0) {
    positions_.narrow(1, first, n).copy_(at::tensor(positions, at::kLong).view({1, n}));
  }
  commit(n, {positions});
  return first;
}

void KvCache::copy_row_from(int64_t row, const KvCache& other, int64_t other_row) {
  const int64_t n = other.lengths_.at(other_row);
  lengths_.at(row) = 0;
  // Room for n slots in this row: other rows' lengths do not add to it.
  ensure_room(std::max<int64_t>(0, n - max_length()));
  for (int64_t l = 0; l < shape_.layers; ++l) {
    keys_[l][row].narrow(1, 0, n).copy_(other.keys_[l][other_row].narrow(1, 0, n));
    values_[l][row].narrow(1, 0, n).copy_(other.values_[l][other_row].narrow(1, 0, n));
  }
  positions_[row].fill_(-1);
  positions_[row].narrow(0, 0, n).copy_(other.positions_[other_row].narrow(0, 0, n));
  if (other.key_valid_.defined() && !key_valid_.defined()) {
    key_valid_ = at::ones({shape_.layers, batch_, shape_.kv_heads, capacity_},
                          at::TensorOptions().dtype(at::kBool).device(device_));
  }
  if (key_valid_.defined()) {
    key_valid_.select(1, row).fill_(true);
    if (other.key_valid_.defined()) {
      key_valid_.select(1, row).narrow(2, 0, n).copy_(
          other.key_valid_.select(1, other_row).narrow(2, 0, n));
      key_valid_suffix_ = key_valid_suffix_ && other.key_valid_suffix_;
    }
  }
  lengths_[row] = n;
  dense_ = dense_ && other.dense_ && all_equal(lengths_);
}

void KvCache::truncate(int64_t row, int64_t length) {
  if (length > lengths_.at(row)) throw std::out_of_range("KvCache::truncate past the end");
  positions_[row].narrow(0, length, capacity_ - length).fill_(-1);
  if (key_valid_.defined())
    key_valid_.select(1, row).narrow(2, length, capacity_ - length).fill_(true);
  lengths_[row] = length;
  if (!all_equal(lengths_)) dense_ = false;
}

void KvCache::set_dense_length(int64_t length) {
  if (batch_ != 1 || length < 0 || length > capacity_)
    throw std::out_of_range("KvCache::set_dense_length: one row of at most capacity slots");
  positions_[0]
      .narrow(0, 0, length)
      .copy_(at::arange(length, at::TensorOptions().dtype(at::kLong).device(device_)));
  positions_[0].narrow(0, length, capacity_ - length).fill_(-1);
  lengths_[0] = length;
  dense_ = true;
}

at::Tensor KvCache::keys(int64_t layer, int64_t extra) const {
  return keys_[layer].narrow(2, 0, max_length() + extra);
}
at::Tensor KvCache::values(int64_t layer, int64_t extra) const {
  return values_[layer].narrow(2, 0, max_length() + extra);
}
at::Tensor KvCache::positions(int64_t extra) const {
  return positions_.narrow(1, 0, max_length() + extra);
}
at::Tensor KvCache::key_valid(int64_t layer, int64_t extra) const {
  if (!key_valid_.defined()) return at::Tensor();
  return key_valid_[layer].narrow(2, 0, max_length() + extra);
}

void KvCache::rerotate(int64_t row, int64_t begin, int64_t end, int64_t delta,
                       const at::Tensor& inv_freq) {
  if (begin < 0 || end > lengths_.at(row) || begin > end) {
    throw std::out_of_range("KvCache::rerotate: span [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside the row");
  }
  const int64_t n = end - begin;
  if (n == 0 || delta == 0) return;
  const at::Tensor deltas =
      at::full({n}, delta, at::TensorOptions().dtype(at::kLong).device(device_));
  const at::Tensor freq = inv_freq.to(device_);
  for (int64_t l = 0; l < shape_.layers; ++l) {
    at::Tensor span = keys_[l][row].narrow(1, begin, n).contiguous();  // [H, n, d]
    gpu::rope_rotate_(span, deltas, freq);
    keys_[l][row].narrow(1, begin, n).copy_(span);
  }
  positions_[row].narrow(0, begin, n).add_(delta);
  dense_ = false;
}

int64_t KvCache::bytes() const {
  int64_t tokens = 0;
  for (int64_t len : lengths_)
    tokens += len;
  return 2 * shape_.layers * shape_.kv_heads * shape_.head_dim * tokens *
         static_cast<int64_t>(at::elementSize(dtype_));
}

}  // namespace engram
