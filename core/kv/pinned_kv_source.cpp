#include "core/kv/pinned_kv_source.h"

#include <stdexcept>

#include "core/trace/trace_recorder.h"
#include "gpu/device_timeline.h"

namespace engram {

int64_t HostKv::bytes_per_layer() const {
  if (keys.empty()) return 0;
  return 2 * keys[0].numel() * static_cast<int64_t>(keys[0].element_size());
}

HostKv offload_to_host(const KvCache& cache, int64_t tokens) {
  HostKv host;
  for (int64_t l = 0; l < cache.shape().layers; ++l) {
    for (auto [src, dst] : {std::pair{cache.keys(l).narrow(2, 0, tokens), &host.keys},
                            std::pair{cache.values(l).narrow(2, 0, tokens), &host.values}}) {
      at::Tensor pinned = gpu::empty_pinned(src.sizes(), src.scalar_type());
      pinned.copy_(src);
      dst->push_back(pinned);
    }
  }
  host.positions = cache.positions().narrow(1, 0, tokens).to(at::kCPU).clone();
  host.dense = cache.dense();
  return host;
}

PinnedKvSource::PinnedKvSource(const HostKv& prefix, KvCache& tail, int64_t prefetch_depth)
    : prefix_(prefix), tail_(tail), depth_(std::max<int64_t>(1, prefetch_depth)) {
  if (prefix.keys.size() != static_cast<size_t>(tail.shape().layers)) {
    throw std::invalid_argument("PinnedKvSource: prefix and cache have different layer counts");
  }
  prefix_positions_ = prefix.positions.to(tail.device());
}

void PinnedKvSource::issue_copy(int64_t layer, const ForwardContext& ctx) {
  if (layer >= static_cast<int64_t>(prefix_.keys.size())) return;
  gpu::DeviceTimeline& tl = *ctx.timeline;
  InFlight& f = in_flight_[layer];
  const auto opts = prefix_.keys[layer].options().device(tail_.device()).pinned_memory(false);
  f.keys = at::empty(prefix_.keys[layer].sizes(), opts);
  f.values = at::empty(prefix_.values[layer].sizes(), opts);
  const int64_t start = tl.mark(gpu::Lane::kCopy);
  tl.copy_async(f.keys, prefix_.keys[layer]);
  f.done_mark = tl.copy_async(f.values, prefix_.values[layer]);
  if (ctx.trace) {
    ctx.trace->add(layer, TraceLane::kCopy, "kv_copy", start, f.done_mark, prefix_.tokens(),
                   prefix_.bytes_per_layer());
  }
}

void PinnedKvSource::begin_forward(const ForwardContext& ctx) {
  tail_.ensure_room(ctx.fresh_tokens);
  const int64_t p = prefix_.tokens();
  dense_after_ = prefix_.dense && tail_dense_;
  for (int64_t b = 0; b < ctx.batch && dense_after_; ++b) {
    for (int64_t s = 0; s < ctx.fresh_tokens; ++s) {
      if (ctx.positions[b][s] != p + tail_.lengths()[b] + s) dense_after_ = false;
    }
  }
  in_flight_.assign(prefix_.keys.size(), InFlight{});
  for (int64_t l = 0; l < depth_; ++l)
    issue_copy(l, ctx);
}

AttendKv PinnedKvSource::layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) {
  issue_copy(layer + depth_, ctx);
  InFlight& f = in_flight_[layer];
  ctx.timeline->compute_wait(f.done_mark);
  tail_.write(layer, fresh.keys, fresh.values, fresh.positions);
  AttendKv out;
  out.keys = at::cat({f.keys, tail_.keys(layer, ctx.fresh_tokens)}, 2);
  out.values = at::cat({f.values, tail_.values(layer, ctx.fresh_tokens)}, 2);
  out.key_positions = at::cat({prefix_positions_, tail_.positions(ctx.fresh_tokens)}, 1);
  out.dense_causal = dense_after_;
  f = InFlight{};  // the device copy is released once attention has used it
  return out;
}

void PinnedKvSource::end_forward(const ForwardContext& ctx) {
  tail_.commit(ctx.fresh_tokens, ctx.positions);
  tail_dense_ = dense_after_;
}

}  // namespace engram
