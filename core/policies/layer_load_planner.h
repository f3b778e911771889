// Which layers of which memory units to copy from the pinned pool, and when, during a selective
// prefill (KEEP §4.3; issue 16). Tensor-free: the runner (core/engine/unit_layer_loader.h) asks
// and issues the copies on the copy stream.
//
// Layer l reads the cached KV of every unit not wholly recomputed there ("dropped" at l). The
// recompute set never grows (recompute_policy.h), so a unit dropped at l is dropped at every
// later layer: its KV for all of them will certainly be read. Three schedules:
//   serial    the copies of layer l are issued when layer l is about to run and compute waits
//             for them (KEEP Fig. 8a: no overlap);
//   naive     while layer l computes, layer l+1 of the units dropped at l is copied (Fig. 8b);
//             units dropped only at the end of layer l are copied after it, and layer l+1 waits;
//   balanced  naive, and whenever the copy engine would be idle before layer l's compute ends,
//             whole future layers (l+2, l+3, ...) of the units already dropped are copied ahead
//             (Fig. 8c): early layers, which recompute much and read little, carry the copies of
//             late layers, which recompute little and read much.
// No schedule ever copies a (unit, layer) twice or one that is not read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engram {

enum class LayerLoading { kSerial, kNaive, kBalanced };

// "serial", "naive", "balanced"; throws std::invalid_argument listing them.
LayerLoading parse_layer_loading(const std::string& name);
std::string layer_loading_name(LayerLoading mode);

struct LayerLoadJob {
  int64_t unit = 0;
  int64_t layer = 0;
  bool operator==(const LayerLoadJob&) const = default;
};

class LayerLoadPlanner {
 public:
  LayerLoadPlanner(LayerLoading mode, int64_t layers, int64_t units);

  // Layer `layer` runs next. `dropped[u]`: unit u is not wholly recomputed at this layer (its
  // cached KV is read); `extra[u]` (may be empty): read although wholly recomputed (CacheBlend
  // compares fresh keys with the cached ones at its selection layer). Returns the copies not
  // issued yet that this layer reads: compute must wait for them. Throws std::logic_error when a
  // unit dropped earlier is no longer dropped, or layers come out of order.
  std::vector<LayerLoadJob> due(int64_t layer, const std::vector<bool>& dropped,
                                const std::vector<bool>& extra = {});
  // Issued while `layer` computes (naive and balanced): layer+1 of the units dropped at `layer`,
  // and of the units in `extra_next` (read at layer+1 although recomputed there).
  std::vector<LayerLoadJob> ahead(int64_t layer, const std::vector<bool>& extra_next = {});
  // Balanced only, while `layer` computes and the copy engine is idle: the next future layer
  // (> layer+1) with copies of already dropped units not issued yet, all of them; empty when
  // there is none (or the schedule is not balanced).
  std::vector<LayerLoadJob> prefetch(int64_t layer);
  // Every unit is dropped already: nothing can change the remaining copies, so a balanced
  // loader may issue them all at once instead of waiting for idle time.
  bool all_dropped() const;

  bool issued(int64_t unit, int64_t layer) const;
  LayerLoading mode() const { return mode_; }
  int64_t layers() const { return layers_; }
  int64_t units() const { return units_; }

 private:
  void take(int64_t unit, int64_t layer, std::vector<LayerLoadJob>& out);

  LayerLoading mode_;
  int64_t layers_;
  int64_t units_;
  int64_t current_ = -1;
  std::vector<bool> dropped_;
  std::vector<bool> issued_;  // [unit * layers + layer]
};

}  // namespace engram
