// Brings the cached KV of an assembled prompt's memory units from the paged pool (pinned host
// pages, or device pages for a unit just recomputed) into the selective prefill's per-layer
// buffers, layer by layer on the copy stream, as core/policies/layer_load_planner.h schedules
// it (KEEP §4.3: serial, naive, layer-balanced). One gather kernel per tier and layer batch
// (gpu/page_gather.h); compute waits only for the copies the layer reads; each layer's loaded
// keys are re-rotated from where the pool holds them to their assembled positions right before
// the layer reads them. The copies show in the trace as kv_copy intervals.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "core/kv/kv_unit_pool.h"
#include "core/policies/assembled_layout.h"
#include "core/policies/layer_load_planner.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_timeline.h"

namespace engram {

// The prompt's units held in a KvUnitPool (not on disk), one id per prompt unit, in prompt order.
struct PooledUnits {
  const KvUnitPool* pool = nullptr;
  std::vector<int64_t> ids;
  LayerLoading loading = LayerLoading::kBalanced;
  gpu::DeviceTimeline* timeline = nullptr;  // required
  TraceRecorder* trace = nullptr;           // optional: kv_copy intervals
  // Optional, one per layer: a timeline mark (on another stream, recorded before the prefill
  // starts) after which that layer of the device-tier units is written: the units being
  // computed while the prefill runs (KEEP's changed segments, compute_unit_kvs' on_layer). The
  // copies of a layer's device pages wait for it. Empty: everything is written.
  std::vector<int64_t> device_layer_ready;
};

struct UnitLoadStats {
  int64_t jobs = 0;        // (unit, layer) copies
  int64_t bytes = 0;       // K and V
  int64_t batches = 0;     // gather launches (per tier and layer)
  int64_t prefetched = 0;  // jobs issued by balanced prefetch
  int64_t waited = 0;      // jobs issued when their layer was about to run (compute waited)
  // (start, end) marks of each copy batch on the copy stream: resolve them with
  // copy_busy_ms() when wanted (resolving waits for the device and reads every mark).
  std::vector<std::pair<int64_t, int64_t>> copy_marks;
};

// Sum of the copy batches' durations, ms (waits for the device).
double copy_busy_ms(gpu::DeviceTimeline& timeline, const UnitLoadStats& stats);

class UnitLayerLoader {
 public:
  // `keys`/`values`: the prefill's cached KV, [layers, kv_heads, n, head_dim] on the device,
  // rows laid out as `layout`. Throws std::invalid_argument when a unit is on disk, its token
  // count differs from the layout or the pool's shape differs.
  UnitLayerLoader(const PooledUnits& units, const AssembledLayout& layout, at::Tensor keys,
                  at::Tensor values, const at::Tensor& inv_freq);

  // Layer `layer` runs next: issue the copies it reads that are not issued yet (and, except for
  // the serial schedule, layer+1's of the units already dropped), make compute wait for this
  // layer's, and re-rotate its loaded keys. `dropped`/`extra`/`extra_next` as
  // LayerLoadPlanner::due/ahead.
  void before_layer(int64_t layer, const std::vector<bool>& dropped, const std::vector<bool>& extra,
                    const std::vector<bool>& extra_next);
  // After the layer's compute is enqueued, before the host waits for it: the balanced schedule
  // keeps the copy engine busy with future layers of dropped units until compute reaches
  // `compute_mark` (or issues them all when every unit is dropped). No-op otherwise.
  void while_computing(int64_t layer, int64_t compute_mark);

  // The totals so far (no wait).
  UnitLoadStats stats() const { return stats_; }

 private:
  int64_t issue(const std::vector<LayerLoadJob>& jobs);

  PooledUnits units_;
  const AssembledLayout& layout_;
  at::Tensor keys_, values_;
  at::Tensor deltas_;  // [n] assembled position - stored position, 0 outside units
  at::Tensor inv_freq_;
  LayerLoadPlanner planner_;
  std::vector<int64_t> ready_mark_;        // [layer] last copy mark of a batch holding that layer
  std::vector<at::Tensor> tables_;         // page tables in flight, kept alive until the end
  std::vector<bool> device_ready_waited_;  // [layer] the copy lane waits for device_layer_ready
  int64_t last_copy_mark_ = -1;
  UnitLoadStats stats_;
};

// Units of the layout not wholly recomputed by `rows` (ascending): their cached KV is read.
std::vector<bool> dropped_units(const AssembledLayout& layout, const std::vector<int64_t>& rows);

}  // namespace engram
