// The runner of selective recomputation (issue 16; KEEP §4.2, CacheBlend): one prefill of an
// assembled prompt [prefix | retrieved units | query] in which each layer recomputes only the
// rows a RecomputePolicy chose and uses cached KV for the rest.
//
// Per layer i with recomputed rows R_i (hidden states exist only for R_i):
//   project_qkv on R_i, RoPE at their prompt positions;
//   the layer's KV = the cached KV of every row (the prefix as computed, each unit re-rotated
//   from where it was computed to its assembled position) with R_i's fresh K/V in their place;
//   attention of R_i over all of it, masked exactly by position (row r sits at position r);
//   finish_layer on R_i; the policy picks R_{i+1} ⊆ R_i (the query always in it) from what
//   the runner measured at layer i (unit attention, key deviation: only when asked).
// The layer is core/runtime/decoder_layer.h's, not a copy. The final KV of every layer (what
// decoding continues from) is written into `out`.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "core/engine/memory_unit_kv.h"
#include "core/engine/unit_layer_loader.h"
#include "core/kv/kv_cache.h"
#include "core/policies/assembled_layout.h"
#include "core/policies/recompute_policy.h"
#include "core/runtime/decoder.h"

namespace engram {

struct AssembledPrompt {
  const PrefixKv* prefix = nullptr;  // at positions 0..P-1
  std::vector<const UnitKv*> units;  // in prompt order; computed anywhere
  std::vector<int64_t> query;        // tokens
  AssembledLayout layout() const;
  std::vector<int64_t> tokens() const;  // prefix + units + query
};

// Compute marks of one layer: its start, the end of its QKV projection, the end of what the
// policy measures (-1 when nothing), the end of its attention and its end (output projection,
// MLP, KV written).
struct LayerMarks {
  int64_t start = -1, qkv = -1, evidence = -1, attention = -1, end = -1;
};

struct SelectivePrefill {
  at::Tensor logits;  // f32 [vocab], of the last query row
  RecomputePlan plan;
  AssembledLayout layout;
  UnitLoadStats loads;  // with pooled units
  // Host time spent waiting for the device between layers (the policy's evidence, balanced
  // loading's polling): where the device may run dry while the host decides.
  double host_wait_ms = 0;
  // Host time spent enqueueing the layers (from each layer's start to its end mark): when it is
  // close to the layers' device time, the layers are bound by the host.
  double host_enqueue_ms = 0;
  std::vector<double> host_enqueue_layer_ms;  // the same, layer by layer
  // With pooled units: each layer's compute marks on the pooled timeline (also `layer`
  // intervals in its trace); resolve them with layer_profile() when wanted.
  std::vector<LayerMarks> layer_marks;
};

// Where a selective prefill's device time went: the layers' own time and the time between one
// layer's end and the next one's start (the host deciding, copies waited for), ms. Resolving
// waits for the device.
struct LayerProfile {
  double layers_ms = 0;
  double qkv_ms = 0, attention_ms = 0, mlp_ms = 0;  // the layers' parts (LayerMarks)
  double evidence_ms = 0;  // of attention_ms: up to the policy's evidence (RoPE, KV, probes)
  double between_ms = 0;
};
LayerProfile layer_profile(gpu::DeviceTimeline& timeline, const SelectivePrefill& prefill);

// `out` (one row, empty) receives the assembled KV of every layer; it grows as needed. Throws
// std::invalid_argument for a prompt that does not fit the model or a prefix not at 0, and
// std::logic_error naming the policy when it breaks its contract (a row added, a query row left
// out, a row outside the prompt).
//
// Without `pooled` the units' KV tensors (prompt.units[i]->keys/values, any device) are put in
// place before the first layer. With it, the units' KV comes from their pages in the pool
// (pooled->ids[i] for prompt unit i; prompt.units[i] then gives only the tokens), layer by layer
// on the copy stream as pooled->loading schedules it, and the result carries the copy counts.
SelectivePrefill selective_prefill(const Decoder& decoder, const AssembledPrompt& prompt,
                                   RecomputePolicy& policy, KvCache& out,
                                   const PooledUnits* pooled = nullptr);

// Unit-level attention from head-averaged probabilities `probs` [R, T] (f32, CPU or device) of
// the rows `rows` over the prompt's T tokens: the mass given to each unit recomputed at this
// layer, averaged over the query rows and over each unit's rows (recompute_policy.h).
UnitAttention unit_attention_of(const at::Tensor& probs, const std::vector<int64_t>& rows,
                                const AssembledLayout& layout);
// Its two halves: the mass of each row per unit, [R, units] on the probabilities' device (one
// kernel over `unit_of_column`: [T] the unit index of each prompt row, `units` for the prefix
// and the query), and the aggregation of that mass on the host (after the layer: no wait
// inside it).
at::Tensor unit_of_column(const AssembledLayout& layout, at::Device device);
at::Tensor unit_mass_of(const at::Tensor& probs, const at::Tensor& unit_of_column, int64_t units);
UnitAttention unit_attention_from_mass(const at::Tensor& mass, const std::vector<int64_t>& rows,
                                       const AssembledLayout& layout);

}  // namespace engram
