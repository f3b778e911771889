#include "core/engine/unit_layer_loader.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "gpu/page_gather.h"
#include "gpu/rope_rotate.h"

namespace engram {

std::vector<bool> dropped_units(const AssembledLayout& layout, const std::vector<int64_t>& rows) {
  std::vector<int64_t> recomputed(layout.units.size(), 0);
  for (int64_t r : rows) {
    const int64_t u = layout.unit_of_row(r);
    if (u >= 0) ++recomputed[static_cast<size_t>(u)];
  }
  std::vector<bool> dropped(layout.units.size());
  for (size_t u = 0; u < layout.units.size(); ++u)
    dropped[u] = recomputed[u] < layout.units[u].tokens();
  return dropped;
}

UnitLayerLoader::UnitLayerLoader(const PooledUnits& units, const AssembledLayout& layout,
                                 at::Tensor keys, at::Tensor values, const at::Tensor& inv_freq)
    : units_(units),
      layout_(layout),
      keys_(std::move(keys)),
      values_(std::move(values)),
      planner_(units.loading, keys_.size(0), static_cast<int64_t>(layout.units.size())),
      ready_mark_(static_cast<size_t>(keys_.size(0)), -1),
      device_ready_waited_(static_cast<size_t>(keys_.size(0)), false) {
  if (!units_.pool || !units_.timeline)
    throw std::invalid_argument("unit layer loader: a pool and a timeline are required");
  if (!units_.device_layer_ready.empty() &&
      static_cast<int64_t>(units_.device_layer_ready.size()) != keys_.size(0))
    throw std::invalid_argument("unit layer loader: one device-ready mark per layer is needed");
  if (units_.ids.size() != layout_.units.size())
    throw std::invalid_argument("unit layer loader: " + std::to_string(units_.ids.size()) +
                                " pooled units for a prompt of " +
                                std::to_string(layout_.units.size()));
  const KvCacheShape& shape = units_.pool->pages().shape();
  if (shape.layers != keys_.size(0) || shape.kv_heads != keys_.size(1) ||
      shape.head_dim != keys_.size(3) || units_.pool->pages().dtype() != keys_.scalar_type())
    throw std::invalid_argument("unit layer loader: the pool's shape or dtype differs");
  std::vector<int64_t> deltas(static_cast<size_t>(layout_.total), 0);
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const KvUnit& unit = units_.pool->unit(units_.ids[u]);
    const UnitSpan& span = layout_.units[u];
    if (unit.tier() == PageTier::kDisk)
      throw std::invalid_argument("unit layer loader: unit " + std::to_string(unit.id) +
                                  " is on disk; move it to the pinned pool first");
    if (unit.tokens != span.tokens())
      throw std::invalid_argument("unit layer loader: unit " + std::to_string(unit.id) + " holds " +
                                  std::to_string(unit.tokens) + " tokens, the prompt " +
                                  std::to_string(span.tokens()));
    for (int64_t i = 0; i < unit.tokens; ++i)
      deltas[static_cast<size_t>(span.begin + i)] = span.begin + i - unit.positions[i];
  }
  deltas_ = at::tensor(deltas, at::kLong).to(keys_.device());
  inv_freq_ = inv_freq;
  // The copy lane starts after the buffers' zero fill (enqueued on compute); its later copies,
  // in order behind this point, then need no wait for compute (issue()).
  units_.timeline->on_copy_lane([] {});
}

int64_t UnitLayerLoader::issue(const std::vector<LayerLoadJob>& jobs) {
  if (jobs.empty()) return -1;
  const KvPagePool& pages = units_.pool->pages();
  const int64_t page_tokens = pages.page_tokens();
  const bool cuda = keys_.device().is_cuda();
  gpu::DeviceTimeline& tl = *units_.timeline;
  // (layer, tier) -> page table.
  std::map<std::pair<int64_t, PageTier>, PageTableRows> tables;
  int64_t tokens = 0;
  for (const LayerLoadJob& job : jobs) {
    const KvUnit& unit = units_.pool->unit(units_.ids[static_cast<size_t>(job.unit)]);
    const int64_t first_slot = layout_.units[static_cast<size_t>(job.unit)].begin;
    for (PageTier tier : {PageTier::kDevice, PageTier::kPinned})
      if (std::any_of(unit.pages.begin(), unit.pages.end(),
                      [&](const PageRef& p) { return p.tier == tier; }))
        tables[{job.layer, tier}].add_unit(unit, first_slot, tier, page_tokens);
    tokens += unit.tokens;
  }
  int64_t start = -1;
  const int64_t end = tl.on_copy_lane(
      [&] {
        start = tl.mark(gpu::Lane::kCopy);  // on the copy lane, right before the copies
        for (auto& [key, rows] : tables) {
          const auto layer = static_cast<size_t>(key.first);
          if (key.second == PageTier::kDevice && !units_.device_layer_ready.empty() &&
              !device_ready_waited_[layer]) {
            // The copy lane waits until the layer's units are written (on their own stream).
            // Tables go in layer order, and the writer runs ahead of the prefill that reads them.
            tl.stream_wait(units_.device_layer_ready[layer]);
            device_ready_waited_[layer] = true;
          }
          at::Tensor host = rows.host_tensor(cuda);
          at::Tensor table = cuda ? host.to(keys_.device(), /*non_blocking=*/true) : host;
          at::Tensor k = keys_.select(0, key.first), v = values_.select(0, key.first);
          gpu::gather_pages(k, v, pages.slab(key.second), key.first, table[0], table[1], table[2]);
          tables_.push_back(host);
          tables_.push_back(table);
          ++stats_.batches;
        }
      },
      /*after_compute=*/false);
  // Not after compute: the buffers were allocated before any compute, each (unit, layer) slot
  // is written once, and compute reads it only after waiting for this mark.
  for (const LayerLoadJob& job : jobs)
    ready_mark_[static_cast<size_t>(job.layer)] = end;
  const int64_t bytes = tokens * pages.layer_block_bytes() / page_tokens;
  if (units_.trace)
    units_.trace->add(jobs.front().layer, TraceLane::kCopy, "kv_copy", start, end, tokens, bytes);
  stats_.copy_marks.emplace_back(start, end);
  last_copy_mark_ = end;
  stats_.jobs += static_cast<int64_t>(jobs.size());
  stats_.bytes += bytes;
  return end;
}

void UnitLayerLoader::before_layer(int64_t layer, const std::vector<bool>& dropped,
                                   const std::vector<bool>& extra,
                                   const std::vector<bool>& extra_next) {
  const std::vector<LayerLoadJob> due = planner_.due(layer, dropped, extra);
  stats_.waited += static_cast<int64_t>(due.size());
  issue(due);
  issue(planner_.ahead(layer, extra_next));
  const int64_t ready = ready_mark_[static_cast<size_t>(layer)];
  if (ready < 0) return;  // nothing of this layer is read from the pool
  units_.timeline->compute_wait(ready);
  at::Tensor k = keys_.select(0, layer);
  gpu::rope_rotate_(k, deltas_, inv_freq_);
}

void UnitLayerLoader::while_computing(int64_t layer, int64_t compute_mark) {
  if (planner_.mode() != LayerLoading::kBalanced) return;
  gpu::DeviceTimeline& tl = *units_.timeline;
  const bool settled = planner_.all_dropped();
  while (settled || !tl.reached(compute_mark)) {
    if (!settled && last_copy_mark_ >= 0 && !tl.reached(last_copy_mark_)) {
      std::this_thread::yield();  // the copy engine is busy: look again
      continue;
    }
    const std::vector<LayerLoadJob> jobs = planner_.prefetch(layer);
    if (jobs.empty()) return;
    stats_.prefetched += static_cast<int64_t>(jobs.size());
    issue(jobs);
  }
}

double copy_busy_ms(gpu::DeviceTimeline& timeline, const UnitLoadStats& stats) {
  if (stats.copy_marks.empty()) return 0;
  const std::vector<double> us = timeline.resolve_us();
  double ms = 0;
  for (const auto& [start, end] : stats.copy_marks)
    ms += (us.at(static_cast<size_t>(end)) - us.at(static_cast<size_t>(start))) / 1e3;
  return ms;
}

}  // namespace engram
