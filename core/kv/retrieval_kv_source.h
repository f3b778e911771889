// The runner of decode-time retrieval (core/policies/retrieval_policy.h; issue 17). Built from a
// working set after its prompt was computed, it offloads the KV into a pool (pages of the paged
// pool's pinned tier on CUDA, as LouisKV's CPU pool; core/kv/kv_page_pool.h) and serves each
// decode token's attention, per layer:
//
//   layers < full_layers:  every token (the prompt and everything generated);
//   other layers:          [ sinks S | retrieved B | local window W ], a fixed device region:
//     - the policy's prompt units (clusters, pages) live in the pool, their index on the device;
//       a layer's pool rows are a run of pool pages (row r: row r % P of the r / P-th page; every
//       layer of a page belongs to the same rows), the units are row ranges per KV head over it;
//     - when the policy says the layer retrieves, the units' scores choose rows under the budget
//       (gpu::budgeted_select_rows) and gpu::gather_paged_rows copies them from the pages into the
//       region;
//     - fresh tokens enter the local window; when it is full its oldest temporal segment (or page)
//       moves to the pool as a new unit with its own index (written into the pages on the device,
//       gpu::scatter_pages: no host round trip).
//
// Over a ragged working set (EpiCache per_head=2: its KV heads see different slots) each head's
// units hold only the slots it sees (RetrievalPolicy::ragged_prompt_units) and the region carries
// a per-head validity, attention's key_valid (docs/louiskv.md "Over a ragged working set").
//
// Keys keep the RoPE positions they were computed at and the query is at its true position, so a
// retrieved token attends exactly as in full attention; a budget that covers the pool gives
// exactly full attention (tests/test_louiskv.cpp). With a mirror cache (the conversation's working
// set) every fresh token is also written there, so the conversation stays exact for its store and
// its next turn whatever attention saw.
//
// Two ways to run a decode step. The per-layer path (layer_kv, from Decoder::forward) decides on
// the host. The recorded step (core/runtime/static_decode_step.h, attach()) replays one CUDA graph
// per token: the policy decides on the device (RetrievalPolicy::retrieve_on_device) and the
// decision switches the selection and the gather on or off inside the graph, so nothing waits on
// the host per layer; the host work of the per-layer path moves between replays
// (before_recorded_step: full windows offload; after_recorded_step: the decisions come back once
// per token, for the counts, the temporal segments and the log). Steps the host knows retrieve
// nowhere (a fixed stride's off steps, idle_step()) replay a lean recording without scoring,
// selection and gather. Both paths give the same attention (tests/test_louiskv.cpp).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/kv/kv_page_pool.h"
#include "core/kv/kv_source.h"
#include "core/policies/retrieval_policy.h"
#include "core/trace/retrieval_map.h"

namespace engram {

struct RetrievalStats {
  int64_t steps = 0;
  int64_t retrieval_layers = 0;
  int64_t retrievals = 0;                 // (layer, step) pairs that retrieved
  std::vector<int64_t> layer_retrievals;  // the same per layer (index = layer)
  int64_t loaded_rows = 0;      // rows copied from the pool, summed over layers and KV heads
  int64_t offloaded_units = 0;  // temporal segments / pages moved to the pool
  int64_t device_kv_bytes = 0;  // KV and indexes held on the compute device for attention
  int64_t pool_bytes = 0;       // KV in the pool
  // The recorded step's share (static_decode_step.h): steps it served, host milliseconds spent
  // before its replays (window offloads, inputs) and waiting for its decisions (the step's device
  // time, mostly).
  int64_t recorded_steps = 0;
  double host_ms = 0, wait_ms = 0;
  // Building the source (LouisKV: the prompt keys' k-means per layer; the pool's first rows),
  // which the generator does after the first token, inside the decode time.
  double build_ms = 0;
  int64_t kmeans_rounds = 0;  // LouisKV: k-means rounds, summed over the retrieval layers
  // Layers whose units were made beside the prefill (not in build_ms), and the host time that
  // took on the side worker.
  int64_t units_beside_prefill = 0;
  double beside_prefill_ms = 0;
  double beside_prefill_wait_ms = 0;  // what the first decode step waited for the worker
  // Adds a later source's counts (the runner rebuilds the pool after a plan).
  void add(const RetrievalStats& o) {
    steps += o.steps;
    retrieval_layers = std::max(retrieval_layers, o.retrieval_layers);
    retrievals += o.retrievals;
    if (layer_retrievals.size() < o.layer_retrievals.size())
      layer_retrievals.resize(o.layer_retrievals.size(), 0);
    for (size_t i = 0; i < o.layer_retrievals.size(); ++i)
      layer_retrievals[i] += o.layer_retrievals[i];
    loaded_rows += o.loaded_rows;
    offloaded_units += o.offloaded_units;
    device_kv_bytes = std::max(device_kv_bytes, o.device_kv_bytes);
    pool_bytes = std::max(pool_bytes, o.pool_bytes);
    recorded_steps += o.recorded_steps;
    host_ms += o.host_ms;
    wait_ms += o.wait_ms;
    build_ms += o.build_ms;
    kmeans_rounds += o.kmeans_rounds;
    units_beside_prefill += o.units_beside_prefill;
    beside_prefill_ms += o.beside_prefill_ms;
    beside_prefill_wait_ms += o.beside_prefill_wait_ms;
  }
  // Counts one retrieval of `layer`.
  void count_retrieval(int64_t layer) {
    ++retrievals;
    if (layer_retrievals.size() <= static_cast<size_t>(layer))
      layer_retrievals.resize(static_cast<size_t>(layer) + 1, 0);
    ++layer_retrievals[static_cast<size_t>(layer)];
  }
  // Retrievals per retrieval layer and decode step.
  double retrievals_per_token() const {
    return steps && retrieval_layers ? double(retrievals) / double(steps * retrieval_layers) : 0;
  }
};

// The keys a source turns into a layer's prompt units: those after the sinks. `layer_keys`
// [H, n, d], the layer's first n slots; returns [H, n - min(sinks, n), d].
at::Tensor retrieval_prompt_keys(const at::Tensor& layer_keys, int64_t sinks);

class RetrievalKvSource : public KvSource {
 public:
  // `working`: row 0 holds the prompt (its tokens() slots). `max_new_tokens`: decode steps this
  // source serves. `mirror` (may be null) receives every fresh token as a CacheKvSource would.
  // `ready` (may be null): units already made from the same working set, per layer (undefined
  // `order`: make them here), e.g. beside the prefill (core/kv/prompt_units_beside_prefill.h).
  RetrievalKvSource(RetrievalPolicy& policy, const KvCache& working, int64_t max_new_tokens,
                    KvCache* mirror, const std::vector<PromptUnits>* ready = nullptr);

  void begin_forward(const ForwardContext& ctx) override;
  AttendKv layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) override;
  void end_forward(const ForwardContext& ctx) override;

  const RetrievalStats& stats() const { return stats_; }
  // The side worker's host time for the units it made beside the prefill, and how long the
  // first decode step waited for it (stats only).
  void note_beside_prefill(double worker_ms, double wait_ms) {
    stats_.beside_prefill_ms += worker_ms;
    stats_.beside_prefill_wait_ms += wait_ms;
  }
  // Records this request's retrieval map from here on (a traced request; the units of each
  // retrieval cost a count on the device and a sync). map(): null until then.
  void record_map(int64_t request);
  const RetrievalMap* map() const { return map_.get(); }
  int64_t steps_left() const { return max_new_ - step_; }
  // The recorded step's side (see the top of this file). recordable(): the policy decides on the
  // device, the source mirrors into a working set and every retrieval layer's units fit the
  // selection kernel. recording_version() changes when the shapes a recording read change (a
  // layer's scored units grew by a block): the step records again.
  bool recordable() const;
  int64_t recording_version() const { return recording_version_; }
  bool retrieves_at(int64_t layer) const { return layer >= policy_.settings().full_layers; }
  void before_recorded_step();
  // This step retrieves at no layer, as the host knows before it runs (RetrievalPolicy::idle_at);
  // set by before_recorded_step(). recorded_layer() then skips scoring, selection and gather.
  bool idle_step() const { return idle_step_; }
  // Inside the recording, one retrieval layer: q_rot [1, Hq, d] after RoPE; q, k, v, cos, sin as
  // gpu::rope_kv_write takes them (k, v before RoPE); position [1] int64 on the device. Returns
  // attention's output [1, Hq, d].
  at::Tensor recorded_layer(int64_t layer, const at::Tensor& q_rot, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                            const at::Tensor& sin, const at::Tensor& position, int64_t window,
                            double scale);
  void after_recorded_step();

  // Tokens of each unit of a retrieval layer (prompt units, then offloaded ones): [H, units].
  at::Tensor unit_sizes(int64_t layer) const {
    const Layer& l = layers_.at(layer);
    return l.sizes.defined() ? l.sizes.narrow(1, 0, l.units).cpu() : at::Tensor();
  }

 private:
  struct Layer {
    at::Tensor keys,
        values;  // the region [1, H, S+B+W, d]; a full layer without mirror: [1, H, n+max_new, d]
    int64_t length = 0;         // full layer: tokens held
    int64_t pool_rows = 0;      // rows of the pool this layer holds (prompt units, then offloaded)
    at::Tensor sizes, offsets;  // [H, units] int64 on the device
    at::Tensor index;           // [H, units, I] in the keys' dtype, on the device
    int64_t units = 0;
    int64_t prompt_units = 0;
    // Units a retrieval scores: those in use rounded up to a block (the rest dead, score -inf).
    // Both paths score the same count, so their softmax reductions, and rankings, agree bit for
    // bit; a recording reads a fixed count and is made again when a block is added.
    int64_t scored_units = 0;
    int64_t retrieved = 0;                // valid rows of the retrieved region
    int64_t local = 0;                    // tokens in the local window
    at::Tensor valid;                     // [1, slots] bool on the device: where a slot holds a key
    std::vector<int64_t> segment_starts;  // temporal segments in the local window
    // For the recorded step: which of the units' capacity exist, [capacity] bool; the retrieved
    // region's validity after a retrieval, [B] bool (the first min(B, pool rows)).
    at::Tensor live, retrieved_valid;
    at::Tensor selected_rows;  // the last selection's pool rows [H, B] (-1: none), for the map
    // A layer of a ragged working set (some KV heads hide some of its slots; working_set.h):
    // which slots each head sees, [1, H, slots] bool (the sinks as the working set says, the
    // retrieved region as far as the head's units reach, the window whole); undefined otherwise.
    at::Tensor head_valid;
    // Ragged: the pool rows in each head's units (its visible prompt tokens, then the offloaded
    // ones), and the region slots a retrieval fills for each head, [H, B] bool (in place: a
    // recording reads it).
    std::vector<int64_t> head_rows;
    at::Tensor head_retrieved_valid;
  };

  AttendKv full_layer(Layer& l, const FreshKv& fresh, int64_t position);
  AttendKv retrieval_layer(int64_t layer, Layer& l, const FreshKv& fresh, int64_t position,
                           TraceRecorder* trace);
  // The map's r_t of the layer's last decision, and its own τ when it has one.
  void note_similarity(int64_t layer);
  void offload_oldest(int64_t layer, Layer& l);
  // Rows a retrieval fills per KV head: the most over the heads, and the sum over them.
  int64_t reach(const Layer& l) const;
  int64_t rows_per_retrieval(const Layer& l) const;
  // Ragged: head_retrieved_valid after head_rows changed.
  void update_head_reach(Layer& l);
  // Scores the layer's units against `queries` [Hq, d], selects rows under the budget and copies
  // them from the pool (page `table`) into the region; `enabled` (optional, one bool on the
  // device) switches the selection and the copy off: both decode paths load through here.
  void load_retrieved(int64_t layer, Layer& l, const at::Tensor& queries, const at::Tensor& table,
                      const at::Tensor& enabled = {});
  // Writes slots [first_slot, first_slot + n) of keys/values ([H, N, d] on the device) as pool
  // rows [first_row, first_row + n) of `layer`, taking pages as the rows grow.
  void write_rows(int64_t layer, int64_t first_row, const at::Tensor& keys,
                  const at::Tensor& values, int64_t first_slot, int64_t n);
  AttendKv attend(const Layer& l, int64_t slots, int64_t position) const;

  RetrievalPolicy& policy_;
  KvCache* mirror_;
  std::unique_ptr<KvPagePool> pool_;  // null when every layer attends in full
  std::vector<PageRef> pool_pages_;   // the pages of the rows, in row order
  at::Tensor page_table_;             // [pool pages] int64 on the device: slab page per row page
  int64_t max_new_;
  int64_t sinks_ = 0;
  int64_t step_ = 0;
  std::vector<Layer> layers_;
  RetrievalStats stats_;
  int64_t kv_heads_ = 0;
  // Zeros of `sizes` for a layer's index: on the device, or page-locked host memory the device
  // reads in place (RetrievalSettings::index_on_host).
  at::Tensor new_index(at::IntArrayRef sizes, const at::TensorOptions& options) const;
  int64_t index_device_bytes(const at::Tensor& index) const;
  std::unique_ptr<RetrievalMap> map_;
  // Units the layer's last selection took rows from, summed over the KV heads (for the map).
  int64_t loaded_units(const Layer& l) const;
  // The recorded step's device inputs (int64 [1 + layers]: the step, then each layer's window
  // slot) and its decisions (f32 [layers, 2], RetrievalPolicy::retrieve_on_device).
  at::Tensor recorded_inputs_, decisions_, last_slot_;
  int64_t recording_version_ = 0;
  bool idle_step_ = false;
  void count_scored_units(Layer& l);
  // One more block of unit capacity (sizes, offsets, index, live), up to prompt units +
  // max_new + 1; the recording is made again.
  void grow_units(Layer& l);
};

}  // namespace engram
