#include "core/kv/working_set.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/policies/keep_plan_index.h"
#include "gpu/rope_rotate.h"

namespace engram {
namespace {

// The longest suffix of n slots that is the stream's own tail (ending at `stream_end`) in every
// one of `rows` (layer, head) rows: it stays truncatable; the slots before it are what plans
// kept. stream_of(r, j): the stream index slot j of row r holds.
template <class StreamOf>
int64_t exact_suffix(int64_t rows, int64_t n, int64_t stream_end, const StreamOf& stream_of) {
  int64_t suffix = 0;
  for (bool same = true; suffix < n && same;) {
    for (int64_t r = 0; r < rows && same; ++r)
      same = stream_of(r, n - 1 - suffix) == stream_end - 1 - suffix;
    if (same) ++suffix;
  }
  return suffix;
}

}  // namespace

KvWorkingSet::KvWorkingSet(KvCacheShape shape, int64_t capacity, at::ScalarType dtype,
                           at::Device device, int64_t max_positions)
    : owned_(std::make_unique<KvCache>(shape, 1, capacity > 0 ? capacity : 256, dtype, device)),
      cache_(*owned_),
      fixed_(capacity > 0),
      max_positions_(max_positions) {}

KvWorkingSet::KvWorkingSet(KvCache& cache, int64_t max_positions)
    : cache_(cache), fixed_(false), max_positions_(max_positions) {
  if (cache.batch() != 1) throw std::invalid_argument("KvWorkingSet: the cache must have one row");
  stream_end_ = cache.lengths()[0];  // the whole cache is the stream's verbatim tail
  capture_from_ = stream_end_;
  peak_ = stream_end_;
}

int64_t KvWorkingSet::next_position() const {
  return tokens();  // slots always sit at positions 0..tokens()-1 (full, or compacted by a plan)
}

WorkingSetInfo KvWorkingSet::info() const {
  WorkingSetInfo w;
  w.tokens = tokens();
  w.stream_tokens = stream_end_;
  w.capacity = cache_.capacity();
  w.fixed_capacity = fixed_;
  w.layers = cache_.shape().layers;
  w.kv_heads = cache_.shape().kv_heads;
  w.max_positions = max_positions_;
  return w;
}

void KvWorkingSet::appended(int64_t tokens) {
  stream_end_ += tokens;
  note_peak();
}

bool KvWorkingSet::truncate(int64_t stream_length) {
  if (stream_length > stream_end_) throw std::out_of_range("KvWorkingSet::truncate past the end");
  if (stream_length < exact_stream_) return false;
  cache_.truncate(0, exact_slot_ + (stream_length - exact_stream_));
  stream_end_ = stream_length;
  unchanged_ = std::min(unchanged_, tokens());
  // Captured runs lose what lies past the cut.
  std::vector<KvRun> kept;
  for (KvRun& run : pending_) {
    if (run.begin >= stream_length) continue;
    if (run.end > stream_length) {
      const int64_t n = stream_length - run.begin;
      run.kv = run.kv.narrow(3, 0, n);
      run.positions = run.positions.narrow(0, 0, n);
      run.end = stream_length;
    }
    kept.push_back(std::move(run));
  }
  pending_ = std::move(kept);
  capture_from_ = std::min(capture_from_, stream_length);
  return true;
}

void KvWorkingSet::clear() {
  cache_.truncate(0, 0);
  cache_.set_key_valid(at::Tensor());
  set_compacted(at::Tensor());
  exact_slot_ = exact_stream_ = stream_end_ = 0;
  pending_.clear();
  capture_from_ = 0;
  peak_ = 0;
  unchanged_ = 0;
}

void KvWorkingSet::assign(const KvWorkingSet& other) {
  const int64_t n = other.tokens();
  if (fixed_ && n > cache_.capacity())
    throw std::invalid_argument("KvWorkingSet::assign: the other set does not fit");
  cache_.truncate(0, 0);  // keys(l, n) below are the first n slots
  if (!fixed_) cache_.ensure_room(n);
  // Equal capacities copy whole contiguous layers (one copy each; a narrowed [heads, n, d] view
  // is strided).
  const bool whole = other.cache_.capacity() == cache_.capacity();
  for (int64_t l = 0; l < cache_.shape().layers; ++l) {
    if (whole) {
      const int64_t spare = other.cache_.capacity() - other.cache_.max_length();
      cache_.keys(l, cache_.capacity())[0].copy_(other.cache_.keys(l, spare)[0]);
      cache_.values(l, cache_.capacity())[0].copy_(other.cache_.values(l, spare)[0]);
      continue;
    }
    cache_.keys(l, n)[0].narrow(1, 0, n).copy_(other.cache_.keys(l)[0].narrow(1, 0, n));
    cache_.values(l, n)[0].narrow(1, 0, n).copy_(other.cache_.values(l)[0].narrow(1, 0, n));
  }
  cache_.set_dense_length(n);
  const at::Tensor valid = other.cache_.key_valid(0);
  cache_.set_key_valid(valid.defined() ? other.slot_stream().ge(0) : at::Tensor());
  set_compacted(other.compacted_);
  exact_slot_ = other.exact_slot_;
  exact_stream_ = other.exact_stream_;
  stream_end_ = other.stream_end_;
  capture_from_ = other.stream_end_;
  pending_.clear();
  peak_ = other.peak_;
  evicted_ = other.evicted_;
  unchanged_ = 0;
}

WorkingSetLayout KvWorkingSet::layout() const {
  WorkingSetLayout l;
  l.tokens = tokens();
  l.compacted = compacted_on_host();
  l.exact_slot = exact_slot_;
  l.exact_stream = exact_stream_;
  l.stream_end = stream_end_;
  l.peak = peak_;
  l.evicted = evicted_;
  l.ragged = cache_.key_valid(0).defined();
  return l;
}

void KvWorkingSet::restore(const WorkingSetLayout& layout) {
  if (tokens() != layout.tokens)
    throw std::logic_error("KvWorkingSet::restore: the slots of the layout are not loaded");
  set_compacted(layout.compacted);
  exact_slot_ = layout.exact_slot;
  exact_stream_ = layout.exact_stream;
  stream_end_ = layout.stream_end;
  capture_from_ = stream_end_;
  pending_.clear();
  peak_ = layout.peak;
  evicted_ = layout.evicted;
  cache_.set_key_valid(layout.ragged ? slot_stream().ge(0) : at::Tensor());
  unchanged_ = 0;
}

at::Tensor KvWorkingSet::slot_stream() const {
  return slot_map_on(at::kCPU).contiguous();
}

at::Tensor KvWorkingSet::slot_map_on(at::Device device) const {
  const KvCacheShape& s = cache_.shape();
  const int64_t tail = tokens() - exact_slot_;
  at::Tensor tail_ids = at::arange(exact_stream_, exact_stream_ + tail,
                                   at::TensorOptions().dtype(at::kLong).device(device))
                            .view({1, 1, tail})
                            .expand({s.layers, s.kv_heads, tail});
  if (exact_slot_ == 0) return tail_ids;
  const at::Tensor held = device.is_cpu() ? compacted_on_host() : compacted_.to(device);
  return at::cat({held, tail_ids}, 2);
}

void KvWorkingSet::set_compacted(at::Tensor map) {
  compacted_ = std::move(map);
  compacted_host_ = at::Tensor();
}

const at::Tensor& KvWorkingSet::compacted_on_host() const {
  if (!compacted_.defined() || compacted_.is_cpu()) return compacted_;
  if (!compacted_host_.defined()) compacted_host_ = compacted_.to(at::kCPU);
  return compacted_host_;
}

std::vector<float> KvWorkingSet::attention_share() const {
  std::vector<float> share(static_cast<size_t>(stream_end_), 0.0f);
  std::fill(share.begin() + exact_stream_, share.end(), 1.0f);
  if (exact_slot_ > 0) {
    const at::Tensor held = compacted_on_host().reshape({-1});
    // A ragged working set's padding slots (-1) hold no token.
    const at::Tensor counts =
        at::bincount(held.index({held.ge(0)}), {}, stream_end_)
            .to(at::kFloat)
            .div_(static_cast<float>(compacted_.size(0) * compacted_.size(1)));
    const float* c = counts.data_ptr<float>();
    for (int64_t i = 0; i < exact_stream_; ++i)
      share[static_cast<size_t>(i)] = c[i];
  }
  return share;
}

KvRun KvWorkingSet::copy_tail(int64_t from_stream) const {
  const int64_t n = stream_end_ - from_stream;
  const int64_t first = exact_slot_ + (from_stream - exact_stream_);
  if (from_stream < exact_stream_ || n < 0) {
    throw std::logic_error("KvWorkingSet: tokens to capture are no longer verbatim in the cache");
  }
  KvRun run;
  run.begin = from_stream;
  run.end = stream_end_;
  std::vector<at::Tensor> keys, values;
  for (int64_t l = 0; l < cache_.shape().layers; ++l) {
    keys.push_back(cache_.keys(l)[0].narrow(1, first, n));
    values.push_back(cache_.values(l)[0].narrow(1, first, n));
  }
  run.kv = at::stack({at::stack(keys), at::stack(values)}).to(at::kCPU).contiguous();
  // clone(): on the CPU .to() would alias the live positions, which later plans rewrite.
  run.positions = cache_.positions()[0].narrow(0, first, n).to(at::kCPU).clone();
  return run;
}

std::vector<KvRun> KvWorkingSet::pending() const {
  std::vector<KvRun> out = pending_;
  const int64_t from = out.empty() ? capture_from_ : out.back().end;
  if (!out.empty() && out.front().begin != capture_from_)
    throw std::logic_error("KvWorkingSet: captured runs do not start at the mark");
  if (from < stream_end_) out.push_back(copy_tail(from));
  return out;
}

void KvWorkingSet::mark_stored(int64_t stream_end) {
  std::vector<KvRun> kept;
  for (KvRun& run : pending_) {
    if (run.end <= stream_end) continue;
    if (run.begin < stream_end) {
      const int64_t cut = stream_end - run.begin;
      run.kv = run.kv.narrow(3, cut, run.end - stream_end);
      run.positions = run.positions.narrow(0, cut, run.end - stream_end);
      run.begin = stream_end;
    }
    kept.push_back(std::move(run));
  }
  pending_ = std::move(kept);
  capture_from_ = std::max(capture_from_, stream_end);
}

void KvWorkingSet::capture_before_plan() {
  if (!capture_) return;
  const int64_t from = pending_.empty() ? capture_from_ : pending_.back().end;
  if (from < stream_end_) pending_.push_back(copy_tail(from));
}

void KvWorkingSet::gather_per_head(const at::Tensor& index, const at::Tensor& freq) {
  const KvCacheShape& s = cache_.shape();
  const int64_t before = tokens(), n = index.size(2);
  // The old positions are read on the device: one rotation per layer, no host work per head (a
  // plan over 32 layers x 8 heads took ~250 ms on an 8B shape).
  const at::Tensor old_positions = cache_.positions()[0].narrow(0, 0, before).clone();
  const at::Tensor target = at::arange(n, index.options());
  for (int64_t l = 0; l < s.layers; ++l) {
    at::Tensor keys = cache_.keys(l)[0];  // [H, before, d] view of the storage
    at::Tensor values = cache_.values(l)[0];
    const at::Tensor idx = index[l];  // [H, n]
    const at::Tensor gather_idx = idx.unsqueeze(-1).expand({s.kv_heads, n, s.head_dim});
    const at::Tensor kept_k = keys.gather(1, gather_idx).contiguous();
    const at::Tensor kept_v = values.gather(1, gather_idx);
    // Every head's rows at once: [H·n, d] with one delta per row.
    at::Tensor rows = kept_k.view({s.kv_heads * n, s.head_dim});
    const at::Tensor deltas =
        (target.unsqueeze(0) -
         old_positions.index_select(0, idx.reshape({-1})).view({s.kv_heads, n}))
            .reshape({-1});
    gpu::rope_rotate_(rows, deltas, freq);
    keys.narrow(1, 0, n).copy_(kept_k);
    values.narrow(1, 0, n).copy_(kept_v);
  }
}

void KvWorkingSet::apply(const KeepPlan& plan, const at::Tensor& inv_freq) {
  if (plan.slots.defined()) {
    apply_slots(plan.slots, inv_freq);
    return;
  }
  unchanged_ = 0;
  const KvCacheShape& s = cache_.shape();
  const int64_t before = tokens();
  const int64_t n = plan.kept();
  const bool per_head = !plan.per_head.empty();
  // Without a validity mask every slot holds a token (the mask is set exactly when some does not).
  const bool all_valid = !cache_.key_valid(0).defined();
  // Index of the kept slots, [L, H, n] on the CPU (validated once here, before anything moves).
  // A shorter list (a ragged plan) sits at the end of its n slots, after `n - length` padding
  // slots that read slot 0 and stay invalid: its tokens keep positions next to the fresh ones, and
  // the verbatim tail stays at the same slots in every head (exact_slot(), truncate()).
  const auto host_long = at::TensorOptions().dtype(at::kLong);
  at::Tensor index;
  at::Tensor padded;  // [L, H, n] bool, true on padding slots; undefined when none
  int64_t lowest = 0, highest = 0;
  if (!per_head) {
    index = at::tensor(plan.shared, host_long).view({1, 1, n}).expand({s.layers, s.kv_heads, n});
    if (n > 0) {
      const auto [lo, hi] = std::minmax_element(plan.shared.begin(), plan.shared.end());
      lowest = *lo;
      highest = *hi;
    }
  } else {
    PlanIndex p = per_head_plan_index(plan, s.layers, s.kv_heads, cache_.device().is_cuda());
    index = std::move(p.index);
    if (p.ragged) padded = std::move(p.padding);
    lowest = p.lowest;
    highest = p.highest;
  }
  if (n > 0 && (lowest < 0 || highest >= before)) {
    throw std::out_of_range("KeepPlan: a kept slot is outside the working set's " +
                            std::to_string(before) + " slots");
  }
  capture_before_plan();
  // Every slot held a token (no mask: the map had no -1) and the plan pads none: every kept slot
  // holds one, and the new map is composed in one pass (compose_slot_map). Otherwise the whole
  // map before the plan ([L, H, before], -1 where a slot holds no token) is read through it.
  const bool dense_map = !padded.defined() && all_valid;
  const at::Tensor old_map = dense_map ? at::Tensor() : slot_stream();

  const at::Tensor freq = inv_freq.to(cache_.device());
  if (per_head) {
    // The index is page-locked on CUDA: its copy queues behind the work before it instead of
    // waiting for it (a pageable copy synchronizes the stream first).
    gather_per_head(index.to(cache_.device(), /*non_blocking=*/true), freq);
  } else {
    // Shared plans re-rotate from host positions.
    const at::Tensor old_positions = cache_.positions()[0].narrow(0, 0, before).to(at::kCPU);
    const at::Tensor idx_host = index[0][0];  // [n]
    const at::Tensor idx = idx_host.to(cache_.device());
    const at::Tensor deltas =
        (at::arange(n, host_long) - old_positions.index_select(0, idx_host)).to(freq.device());
    for (int64_t l = 0; l < s.layers; ++l) {
      at::Tensor keys = cache_.keys(l)[0];  // [H, before, d] view of the storage
      at::Tensor values = cache_.values(l)[0];
      at::Tensor kept_k = keys.index_select(1, idx);
      const at::Tensor kept_v = values.index_select(1, idx);
      gpu::rope_rotate_(kept_k, deltas, freq);
      keys.narrow(1, 0, n).copy_(kept_k);
      values.narrow(1, 0, n).copy_(kept_v);
    }
  }
  if (dense_map) {
    // The map is composed while the device gathers: no mask to set, four passes over the
    // [L, H, n] map saved (~5 ms of an idle GPU a shrink of a 3B episode build).
    compose_slot_map(index);
    cache_.set_dense_length(n);
    evicted_ += before - n;
    return;
  }
  cache_.set_dense_length(n);

  at::Tensor map = old_map.gather(2, index);
  if (padded.defined()) map.masked_fill_(padded, -1);
  set_slot_map(map);
  // A slot that holds no token (padding, or one a plan kept from an earlier padding) is hidden
  // from its head; a plan that fills every slot frees the mask.
  const at::Tensor valid = map.ge(0);
  cache_.set_key_valid(valid.all().item<bool>() ? at::Tensor() : valid);
  const int64_t evicted_pairs = old_map.ge(0).sum().item<int64_t>() - valid.sum().item<int64_t>();
  evicted_ += evicted_pairs / (s.layers * s.kv_heads);
}

void KvWorkingSet::apply_slots(const at::Tensor& plan_slots, const at::Tensor& inv_freq) {
  const KvCacheShape& s = cache_.shape();
  const int64_t before = tokens();
  if (plan_slots.dim() != 3 || plan_slots.size(0) != s.layers || plan_slots.size(1) != s.kv_heads ||
      plan_slots.scalar_type() != at::kLong) {
    throw std::invalid_argument("KeepPlan: slots [layers, kv_heads, n] int64 expected");
  }
  const int64_t n = plan_slots.size(2);
  const at::Tensor slots = plan_slots.to(cache_.device());
  if (n > 0) {
    // Two numbers back to the host, before anything moves: a slot outside the working set would
    // fault the gather on the device.
    const at::Tensor bounds = at::stack({slots.min(), slots.max()}).to(at::kCPU);
    const int64_t lowest = bounds[0].item<int64_t>(), highest = bounds[1].item<int64_t>();
    if (lowest < -1 || highest >= before) {
      throw std::out_of_range("KeepPlan: a kept slot is outside the working set's " +
                              std::to_string(before) + " slots");
    }
  }
  unchanged_ = 0;
  capture_before_plan();
  // Everything below stays on the cache's device; the host learns three counts at the end.
  const at::Tensor old_map = slot_map_on(cache_.device());  // [L, H, before], -1: no token
  const at::Tensor padding = slots.lt(0);
  const at::Tensor index = slots.clamp_min(0);  // padding reads slot 0 and stays hidden
  gather_per_head(index, inv_freq.to(cache_.device()));
  cache_.set_dense_length(n);
  const at::Tensor map = old_map.gather(2, index).masked_fill_(padding, -1);
  const at::Tensor valid = map.ge(0);
  // The verbatim tail: the last slots that hold the stream's last tokens in every (layer, head);
  // `last_other` is the last slot that does not (-1: none).
  const at::Tensor in_tail =
      map.eq(at::arange(stream_end_ - n, stream_end_, index.options())).all(0).all(0);
  const at::Tensor last_other = n > 0
                                    ? at::arange(n, index.options()).masked_fill_(in_tail, -1).max()
                                    : at::full({}, -1, index.options());
  const at::Tensor facts = at::stack({last_other, valid.sum(), old_map.ge(0).sum()}).to(at::kCPU);
  const int64_t held_after = facts[1].item<int64_t>(), held_before = facts[2].item<int64_t>();
  exact_slot_ = facts[0].item<int64_t>() + 1;
  exact_stream_ = stream_end_ - (n - exact_slot_);
  set_compacted(exact_slot_ > 0 ? map.narrow(2, 0, exact_slot_).contiguous() : at::Tensor());
  // A slot that holds no token is hidden from its head; a plan that fills every slot frees the
  // mask.
  cache_.set_key_valid(held_after == valid.numel() ? at::Tensor() : valid);
  evicted_ += (held_before - held_after) / (s.layers * s.kv_heads);
}

void KvWorkingSet::set_slot_map(const at::Tensor& map_in) {
  const at::Tensor map = map_in.contiguous();
  const int64_t n = map.size(2);
  if (n == 0) {
    exact_slot_ = 0;
    exact_stream_ = stream_end_;
    set_compacted(at::Tensor());
    return;
  }
  const at::Tensor flat = map.view({-1, n});
  const auto acc = flat.accessor<int64_t, 2>();
  const int64_t suffix =
      exact_suffix(flat.size(0), n, stream_end_, [&](int64_t r, int64_t j) { return acc[r][j]; });
  exact_slot_ = n - suffix;
  exact_stream_ = stream_end_ - suffix;
  set_compacted(exact_slot_ > 0 ? map.narrow(2, 0, exact_slot_).contiguous() : at::Tensor());
}

void KvWorkingSet::compose_slot_map(const at::Tensor& index_in) {
  const at::Tensor index = index_in.contiguous();
  const int64_t rows = index.size(0) * index.size(1), n = index.size(2);
  const int64_t* idx = index.data_ptr<int64_t>();
  const at::Tensor old = exact_slot_ > 0 ? compacted_on_host().contiguous() : at::Tensor();
  const int64_t* held = old.defined() ? old.data_ptr<int64_t>() : nullptr;
  const int64_t old_exact = exact_slot_, old_stream = exact_stream_;
  // The stream index slot s of row r held before the plan: compacted, or the verbatim tail.
  const auto stream_of = [&](int64_t r, int64_t s) {
    return s < old_exact ? held[r * old_exact + s] : old_stream + (s - old_exact);
  };
  const int64_t suffix = exact_suffix(
      rows, n, stream_end_, [&](int64_t r, int64_t j) { return stream_of(r, idx[r * n + j]); });
  exact_slot_ = n - suffix;
  exact_stream_ = stream_end_ - suffix;
  if (exact_slot_ == 0) {
    set_compacted(at::Tensor());
    return;
  }
  at::Tensor map = at::empty({index.size(0), index.size(1), exact_slot_}, at::kLong);
  int64_t* out = map.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < exact_slot_; ++j)
      out[r * exact_slot_ + j] = stream_of(r, idx[r * n + j]);
  set_compacted(map);
}

void KvWorkingSet::adopt(const KvCache& cache, const at::Tensor& slot_stream,
                         int64_t stream_tokens) {
  unchanged_ = 0;
  const KvCacheShape& s = cache_.shape();
  const int64_t n = cache.lengths()[0];
  if (cache.shape().layers != s.layers || cache.shape().kv_heads != s.kv_heads ||
      cache.shape().head_dim != s.head_dim || cache.dtype() != cache_.dtype() ||
      cache.device() != cache_.device() || cache.batch() != 1) {
    throw std::invalid_argument("KvWorkingSet::adopt: the cache's layout differs");
  }
  if (slot_stream.dim() != 3 || slot_stream.size(2) != n) {
    throw std::invalid_argument("KvWorkingSet::adopt: one stream index per slot expected");
  }
  if (fixed_ && n > cache_.capacity()) {
    throw std::invalid_argument("KvWorkingSet::adopt: " + std::to_string(n) +
                                " slots exceed the working set's " +
                                std::to_string(cache_.capacity()));
  }
  clear();
  if (!fixed_) cache_.ensure_room(n);
  for (int64_t l = 0; l < s.layers; ++l) {
    cache_.keys(l, n)[0].narrow(1, 0, n).copy_(cache.keys(l)[0].narrow(1, 0, n));
    cache_.values(l, n)[0].narrow(1, 0, n).copy_(cache.values(l)[0].narrow(1, 0, n));
  }
  cache_.set_dense_length(n);
  stream_end_ = stream_tokens;
  const at::Tensor map = slot_stream.to(at::kCPU, at::kLong).expand({s.layers, s.kv_heads, n});
  set_slot_map(map);
  // Slots stored as -1 (a ragged plan's padding) come back hidden from their heads.
  const at::Tensor valid = map.ge(0);
  if (!valid.all().item<bool>()) cache_.set_key_valid(valid.contiguous());
  capture_from_ = stream_tokens;
  peak_ = n;
}

}  // namespace engram
