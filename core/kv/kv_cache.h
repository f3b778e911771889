// Keys and values of B sequences on one device, per layer [B, kv_heads, capacity, head_dim],
// each slot with its RoPE position (-1 when empty). Rows may have different lengths (batched
// decode of sequences of different lengths uses padding + a position mask). Keys are stored
// after RoPE; rerotate() moves a span to new positions without recompute.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace engram {

struct KvCacheShape {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

class KvCache {
 public:
  KvCache(KvCacheShape shape, int64_t batch, int64_t capacity, at::ScalarType dtype,
          at::Device device);

  // Writes S tokens of one layer into every row at the row's current length (lengths advance
  // in commit(), after all layers have written).
  void write(int64_t layer, const at::Tensor& keys, const at::Tensor& values,
             const at::Tensor& positions);
  // Advances every row by `tokens` and records whether rows stay dense (positions 0..len-1).
  void commit(int64_t tokens, const std::vector<std::vector<int64_t>>& positions);
  // Advances row `row` alone by one token at `position` (a batched step where some rows wait).
  void commit_row(int64_t row, int64_t position);
  // Keeps the first `length` tokens of row `row` (rollback for regenerate).
  void truncate(int64_t row, int64_t length);
  // Replaces row `row` with row `other_row` of `other` (same layers and heads): a request's KV
  // joins a batch.
  void copy_row_from(int64_t row, const KvCache& other, int64_t other_row);
  // Row 0 of a one-row cache now holds `length` slots at positions 0..length-1 (a working set
  // after its kept slots were compacted there); later slots become empty.
  void set_dense_length(int64_t length);
  // One-row caches: makes the next `positions.size()` slots part of the row at those positions
  // without writing them (their KV arrives later, e.g. by asynchronous copies per layer, before
  // attention reads them) and returns the first slot. `spare` more slots are kept free after
  // them (a page-sized copy may run past the last claimed slot).
  int64_t claim(const std::vector<int64_t>& positions, int64_t spare = 0);
  // Grows capacity (copying) so that `tokens` more fit in every row (moved layers come back first).
  void ensure_room(int64_t tokens);
  // Moves the keys and values of `layers` into one page-locked host slab that the device addresses
  // in place (gpu::device_view_of_pinned): every view, write and kernel on those layers keeps
  // working, over PCIe, and their device memory is freed. Decode-time retrieval (LouisKV, Quest)
  // attends those layers from its own device region and only writes each new token here, so the
  // conversation's KV waits in host memory while a reply decodes, as the papers keep it. Off CUDA
  // the layers move into fresh host tensors (the same bookkeeping). Layers already moved stay.
  void move_layers_to_host(const std::vector<int64_t>& layers);
  // The two halves of move_layers_to_host, to overlap the copy with other work: stage copies the
  // layers into the host slab on the current stream (e.g. a gpu::StreamFork's side stream); use
  // switches to the slab once those copies are ordered before the current stream's work (joined).
  // Nothing may write the staged layers in between.
  void stage_layers_to_host(const std::vector<int64_t>& layers);
  // stage_layers_to_host in steps, a layer as soon as its KV is final (LouisKV's prefill, from
  // a gpu::SideWorker): begin_staging allocates the slab, stage_layer copies one of its layers.
  // Returns the layers staged (those not in host memory already).
  std::vector<int64_t> begin_staging(const std::vector<int64_t>& layers);
  void stage_layer(int64_t layer);
  // Forgets a staging that will not be used (its slab is freed once its copies are done).
  void drop_staged();
  void use_staged_layers();
  // Every moved layer back in device memory (one copy from the slab); a no-op when none is.
  void restore_layers();
  // How many layers wait in host memory.
  int64_t host_layers() const;
  // Changes whenever a layer's storage moves (growth, move_layers_to_host, restore_layers): what
  // a recorded step read is then elsewhere.
  int64_t storage_version() const { return storage_version_; }
  // One-row caches: which slots each (layer, KV head) may attend, `valid` [layers, kv_heads, n]
  // bool for the first n slots; later slots (fresh tokens) are valid for every head. A ragged
  // working set (core/kv/working_set.h) pads its shorter (layer, head) lists with invalid slots.
  // Undefined: every slot valid, and the mask is freed (attention keeps its unmasked fast paths).
  void set_key_valid(const at::Tensor& valid);
  // Whether every (layer, row, head)'s hidden slots precede all its valid ones (true without a
  // mask): attention's AttendKv::key_valid_suffix.
  bool key_valid_suffix() const { return key_valid_suffix_; }

  // Views over the first max_length() (+ pending) slots.
  at::Tensor keys(int64_t layer, int64_t extra = 0) const;
  at::Tensor values(int64_t layer, int64_t extra = 0) const;
  at::Tensor positions(int64_t extra = 0) const;
  // [B, kv_heads, max_length() + extra] bool, or undefined when every slot is valid.
  at::Tensor key_valid(int64_t layer, int64_t extra = 0) const;

  // Slot index tensor [B, S] for writing S tokens at the rows' current lengths.
  at::Tensor write_slots(int64_t tokens) const;

  // Applies a RoPE position delta to row `row`'s keys in [begin, end) of every layer and shifts
  // their recorded positions.
  void rerotate(int64_t row, int64_t begin, int64_t end, int64_t delta, const at::Tensor& inv_freq);

  const std::vector<int64_t>& lengths() const { return lengths_; }
  int64_t max_length() const;
  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  bool dense() const { return dense_; }
  int64_t bytes() const;  // bytes held by valid slots
  const KvCacheShape& shape() const { return shape_; }
  at::Device device() const { return device_; }
  at::ScalarType dtype() const { return dtype_; }

 private:
  // [batch, kv_heads, capacity, head_dim] zeros of the cache's dtype, where the cache lives.
  at::Tensor zeroed_storage(int64_t capacity) const;
  KvCacheShape shape_;
  int64_t batch_;
  int64_t capacity_;
  at::ScalarType dtype_;
  at::Device device_;
  std::vector<at::Tensor> keys_;  // per layer [B, H, capacity, d]
  std::vector<at::Tensor> values_;
  // Moved layers (move_layers_to_host): their index and the host slab [2, moved, B, H, capacity,
  // d] that keys_ / values_ view from the device.
  std::vector<int64_t> host_layer_ids_;
  at::Tensor host_slab_;
  std::vector<int64_t> staged_layer_ids_;  // stage_layers_to_host, before use_staged_layers
  at::Tensor staged_slab_;
  int64_t storage_version_ = 0;
  at::Tensor positions_;  // [B, capacity] int64
  at::Tensor key_valid_;  // [layers, B, kv_heads, capacity] bool; undefined = all valid
  bool key_valid_suffix_ = true;
  std::vector<int64_t> lengths_;
  bool dense_ = true;
};

}  // namespace engram
