// Memory units with their KV computed once and reused (KEEP §4.1; issue 16): the shared system
// prefix is computed at positions 0..P-1, and each unit (an object record, the agent's state, a
// finished task, an example) right after the prefix alone, so its KV is what the unit gives when
// it follows the prefix and nothing else (it never lacks its attention sink; DESIGN.md "Memory
// units"). Assembling moves a unit's keys to where it lands in the prompt: RoPE composes, so the
// move R(q-p)·R(p)k = R(q)k is exact (gpu::rope_rotate_, as KvWorkingSet::apply does).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/decoder.h"

namespace engram {

// The shared system prefix's KV. keys post-RoPE.
struct PrefixKv {
  std::vector<int64_t> tokens;
  int64_t first_position = 0;
  at::Tensor keys;    // [layers, kv_heads, P, head_dim]
  at::Tensor values;  // [layers, kv_heads, P, head_dim]
  int64_t end_position() const { return first_position + static_cast<int64_t>(tokens.size()); }
};

// A memory segment as the prompt holds it; `version` bumps when its text changes.
struct MemoryUnit {
  std::string key;
  std::string kind;
  int64_t version = 0;
  std::vector<int64_t> tokens;
};

// A unit's KV, keys post-RoPE at positions first_position..first_position+n-1.
struct UnitKv {
  std::string key;
  int64_t version = 0;
  std::vector<int64_t> tokens;
  int64_t first_position = 0;
  at::Tensor keys;    // [layers, kv_heads, n, head_dim]
  at::Tensor values;  // [layers, kv_heads, n, head_dim]
};

// Plain prefill of the prefix at first_position.. (full attention inside the prefix).
PrefixKv compute_prefix_kv(const Decoder& decoder, std::vector<int64_t> tokens,
                           int64_t first_position = 0);
// The unit right after the prefix (positions prefix.end_position()..). Throws
// std::invalid_argument for a unit without tokens.
UnitKv compute_unit_kv(const Decoder& decoder, const PrefixKv& prefix, const MemoryUnit& unit);
// Several units in one forward, each as compute_unit_kv computes it alone: what a planning step
// does with the units that changed since the last one. Their tokens are packed into one row (no
// padding), so the projections and the MLP are one GEMM each over all of them; attention runs
// per unit over the prefix and the unit.
// `on_layer`, when set, is called as soon as a layer's KV of every unit is enqueued, with that
// layer's keys and values ([kv_heads, slots, head_dim], keys after RoPE) and the first slot of
// each unit (its tokens follow in order): a caller writes them where a concurrent prefill reads
// them (KEEP's pool pages) and marks the point, layer by layer.
using UnitLayerKv =
    std::function<void(int64_t layer, const at::Tensor& keys, const at::Tensor& values,
                       const std::vector<int64_t>& first_slots)>;
std::vector<UnitKv> compute_unit_kvs(const Decoder& decoder, const PrefixKv& prefix,
                                     const std::vector<MemoryUnit>& units,
                                     const UnitLayerKv& on_layer = {});
// A copy of `kv` whose keys are re-rotated to start at `first_position`.
UnitKv move_unit_kv(const UnitKv& kv, int64_t first_position, const at::Tensor& inv_freq);

// Unit KV by key, recomputed when the unit's version or tokens change (KEEP: "one KV per object
// state, re-prefilled when the object changes").
class UnitKvStore {
 public:
  const UnitKv& get(const Decoder& decoder, const PrefixKv& prefix, const MemoryUnit& unit);
  int64_t computed() const { return computed_; }
  int64_t reused() const { return reused_; }

 private:
  std::map<std::string, UnitKv> units_;
  int64_t computed_ = 0;
  int64_t reused_ = 0;
};

}  // namespace engram
