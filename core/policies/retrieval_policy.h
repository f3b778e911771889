// Decode-time retrieval (issue 17; DESIGN.md "LouisKV"): while a reply is decoded, attention of
// layer l sees the attention sinks, a budget of tokens retrieved from a KV pool, and a local
// window of the newest generated tokens, instead of every token. A RetrievalPolicy decides: how
// the prompt's KV of a layer splits into units (LouisKV: k-means clusters of keys; Quest: 16-token
// pages), how a unit is indexed, when a layer retrieves (LouisKV: at semantic boundaries, r_t < τ;
// Quest: every token) and how units score against the token's queries. The runner
// (core/kv/retrieval_kv_source.h) applies: it keeps the pool, loads the chosen units' rows under
// the budget (gpu::budgeted_select_rows, gpu::gather_paged_rows) and offloads the local window.
//
// Shapes: H KV heads, g = query heads per KV head, d head_dim, I index width.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace engram {

struct RetrievalSettings {
  int64_t sinks = 64;       // S: the first slots of the working set, always attended
  int64_t window = 256;     // W: newest generated tokens kept on the device
  int64_t budget = 1024;    // B: tokens retrieved from the pool per layer and KV head
  int64_t full_layers = 2;  // layers 0..full_layers-1 keep every token (as Quest and the paper)
  bool prompt_by_decode = false;  // feed a new prompt token by token through retrieval (Quest's
                                  // long-input method) instead of one full-attention prefill
  // While a reply decodes, the working set's retrieval layers wait in page-locked host memory
  // (KvCache::move_layers_to_host) and the device holds only what attention reads: the full
  // layers, each retrieval layer's sinks + budget + window, the units' index (the papers' CPU
  // pool). They come back to the device when the working set is next prefilled or replanned.
  // -1 (default): on CUDA devices; 0: never; 1: always (off CUDA: the same bookkeeping).
  int64_t offload = -1;
  // The prompt's units (LouisKV's k-means per layer, Quest's pages) and the move of each layer to
  // host memory are made layer by layer beside the prefill of an unbounded working set (LouisKV
  // §4: "asynchronously with the prefill forward pass"; core/kv/prompt_units_beside_prefill.h),
  // not after the first token. False (`overlap=0`): after the first token, as before 2026-11-27.
  bool overlap_prefill = true;
  // The units' index (a mean key per cluster and segment) in page-locked host memory that the
  // device reads in place (`host_index=1`; louiskv-paper App. D.2's future work, "offloading KV
  // cache indices to CPU DRAM") instead of device memory: its bytes leave the device's share (the
  // segments' index was ~3.5 % of full KV's at 500 in / 16K out) and each scoring reads it over
  // PCIe (a fixed stride scores only at its retrieval steps). Off CUDA, the same bookkeeping.
  bool index_on_host = false;
};

// The layers that attend from retrieval's own region (those past the full layers), of `layers`.
inline std::vector<int64_t> retrieval_layer_ids(const RetrievalSettings& s, int64_t layers) {
  std::vector<int64_t> ids;
  for (int64_t l = std::max<int64_t>(0, s.full_layers); l < layers; ++l)
    ids.push_back(l);
  return ids;
}

// A layer's prompt KV as units: pool row j of head h holds the prompt token order[h][j]
// (relative to the first token after the sinks); unit u of head h is `sizes[h][u]` rows from
// `offsets[h][u]`; `index` is what scoring compares the queries with.
struct PromptUnits {
  at::Tensor order;           // [H, N] int64, a permutation of 0..N-1 per head
  at::Tensor sizes;           // [H, U] int64 (0: an empty unit, never taken)
  at::Tensor offsets;         // [H, U] int64
  at::Tensor index;           // [H, U, I] f32 (the source keeps it in the keys' dtype)
  int64_t kmeans_rounds = 0;  // LouisKV: the clustering's rounds for this layer
};

class RetrievalPolicy {
 public:
  virtual ~RetrievalPolicy() = default;
  virtual std::string name() const = 0;
  virtual std::string spec() const = 0;
  virtual std::unique_ptr<RetrievalPolicy> clone() const = 0;
  const RetrievalSettings& settings() const { return settings_; }
  RetrievalSettings& settings() { return settings_; }

  // A new request of `prompt_tokens` in the working set and up to `max_new_tokens` decode steps:
  // forget the previous token's queries (and pick what depends on the request's shape).
  virtual void begin_decode(int64_t layers, int64_t prompt_tokens, int64_t max_new_tokens) = 0;
  // keys [H, N, d] after RoPE, the layer's retrievable prompt tokens (the sinks excluded).
  virtual PromptUnits prompt_units(int64_t layer, const at::Tensor& keys) = 0;
  // The same for a layer of a ragged working set (core/kv/working_set.h), whose KV heads each see
  // some of the keys: `visible` [H, N] bool. Head h's units cover exactly its visible keys: its
  // `order` lists them first and its hidden ones after, in no unit. By default each head's units
  // are made alone (prompt_units() on its visible keys; empty units pad the heads with fewer).
  virtual PromptUnits ragged_prompt_units(int64_t layer, const at::Tensor& keys,
                                          const at::Tensor& visible);
  // The index of one unit of generated tokens leaving the local window: keys [H, n, d] -> [H, I].
  virtual at::Tensor unit_index(const at::Tensor& keys) const = 0;
  // Whether layer `layer` retrieves at decode step `step` (0: the first, always asked) for the
  // token's queries q [H * g, d]. Called once per layer and step, in order.
  virtual bool retrieve(int64_t layer, int64_t step, const at::Tensor& q) = 0;
  // Decisions on the device, for a recorded decode step (core/runtime/static_decode_step.h): the
  // same rule as retrieve(), written into `decision` (f32 [2] on q's device: [0] = 1 to retrieve,
  // [0] = 0 not to; [1] = the similarity it used, for similarity_seen()) with device work only,
  // no host sync and no host state changed after the first call (which may allocate). `step` is an
  // int64 one-element tensor on the device. Policies that return false from
  // decides_on_device() are served by the per-layer path only.
  virtual bool decides_on_device() const { return false; }
  virtual void retrieve_on_device(int64_t /*layer*/, const at::Tensor& /*step*/,
                                  const at::Tensor& /*q*/, at::Tensor& /*decision*/) {}
  // True when the host knows that no layer retrieves at decode step `step` (a fixed stride's off
  // steps): the recorded step then replays a lean recording with no scoring, selection or gather
  // (the device decision still runs, and says 0).
  virtual bool idle_at(int64_t /*step*/) const { return false; }
  // What a device decision saw and decided, reported once the step has run (the τ sweep's log).
  virtual void similarity_seen(int64_t /*layer*/, int64_t /*step*/, float /*similarity*/,
                               bool /*retrieved*/) {}
  // For the retrieval map (core/trace/retrieval_map.h): the similarity the layer's last decision
  // compared with boundary_threshold(), NaN when it compared none (the first step, a fixed
  // stride, a policy that retrieves at every step); the threshold, < 0 for such policies.
  virtual float last_similarity(int64_t /*layer*/) const {
    return std::numeric_limits<float>::quiet_NaN();
  }
  virtual double boundary_threshold() const { return -1; }
  // With a τ of each layer's own (boundary_threshold() < 0 then): the one the layer's last
  // decision compared with, NaN when none.
  virtual float last_threshold(int64_t /*layer*/) const {
    return std::numeric_limits<float>::quiet_NaN();
  }

  // Scores [H, U] f32 of units from q [H * g, d] and index [H, U, I]; higher is kept first.
  // `live` (optional, [U] bool): only those units exist; the rest score -inf (a recorded step
  // scores a fixed capacity of units, of which the first ones are in use).
  // `enabled` (optional, one bool on the device): the layer's device decision; a policy may skip
  // the work when it says false (the scores are then unspecified: nothing is selected from them).
  at::Tensor score(const at::Tensor& q, const at::Tensor& index) const {
    return score(q, index, at::Tensor(), at::Tensor());
  }
  virtual at::Tensor score(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                           const at::Tensor& enabled) const = 0;
  // How generated tokens leave the local window: 0 = whole temporal segments, split where the
  // layer retrieved (LouisKV); n > 0 = pages of n tokens (Quest).
  virtual int64_t page_tokens() const { return 0; }
  // With segments: the fewest tokens a leaving unit holds; shorter segments leave joined with
  // the next ones up to a boundary (a layer that retrieves at nearly every token would otherwise
  // offload a unit of one token at nearly every step).
  virtual int64_t min_segment_tokens() const { return 1; }

 protected:
  RetrievalSettings settings_;
};

}  // namespace engram
