// The KV that attention sees for one conversation or request: a KvCache of fixed capacity (its
// addresses never change, so the CUDA-graph decode step replays over it whatever the policy
// keeps) plus, for every slot, which token of the stream it holds. The runner applies a policy's
// KeepPlan here and nowhere else: kept slots are gathered to the front per (layer, KV head) and
// re-rotated to positions 0..n-1.
//
// Ragged plans (lists of different lengths per (layer, head): EpiCache's head-wise selection and
// layer budgets) keep one slot count n = the longest list, so the cache stays rectangular with
// fixed addresses (the recorded decode step replays over it). A shorter list fills the last of
// the n slots; the slots before it hold no token (slot_stream() -1) and are hidden from that
// head's attention (KvCache::key_valid). Fresh tokens append after n in every head.
//
// The stream is every token ever fed (prompt tokens and the generated tokens fed back); stream
// index i is the i-th of them. Slots [exact_slot(), tokens()) hold the stream's last tokens in
// order in every layer and head (truncate() may cut there); earlier slots are what the policy
// chose to keep, per (layer, head).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/policies/memory_policy.h"

namespace engram {

// KV of stream tokens [begin, end) copied out of the working set before a plan dropped them, or
// at a save: what append-only persistence writes (positions are where the keys are rotated to).
struct KvRun {
  int64_t begin = 0;
  int64_t end = 0;
  at::Tensor kv;         // [2, layers, kv_heads, end - begin, head_dim] on the CPU, cache dtype
  at::Tensor positions;  // [end - begin] int64
};

// A working set without its KV: its slot count and which stream token each slot holds (an
// episode waiting in the paged pool keeps this beside its units, core/engine/episode_kv_pool.h).
struct WorkingSetLayout {
  int64_t tokens = 0;
  at::Tensor compacted;  // [L, H, exact_slot] int64 CPU, or undefined
  int64_t exact_slot = 0;
  int64_t exact_stream = 0;
  int64_t stream_end = 0;
  int64_t peak = 0;
  int64_t evicted = 0;
  bool ragged = false;  // some (layer, head) lists are shorter: slots hidden per head
};

class KvWorkingSet {
 public:
  // `capacity` slots per (layer, head); 0 grows on demand (unbounded policies).
  KvWorkingSet(KvCacheShape shape, int64_t capacity, at::ScalarType dtype, at::Device device,
               int64_t max_positions);
  // A working set over a cache that someone else owns (full KV, grown on demand): the cache's
  // row 0 is the stream so far, at positions 0..n-1.
  KvWorkingSet(KvCache& cache, int64_t max_positions);
  KvWorkingSet(const KvWorkingSet&) = delete;
  KvWorkingSet& operator=(const KvWorkingSet&) = delete;

  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }
  int64_t tokens() const { return cache_.lengths()[0]; }
  int64_t stream_tokens() const { return stream_end_; }
  // The first slot from which every (layer, head) holds the stream's tokens in order, and the
  // stream index it holds.
  int64_t exact_slot() const { return exact_slot_; }
  int64_t exact_stream() const { return exact_stream_; }
  // The RoPE position the next fresh token gets.
  int64_t next_position() const;
  bool fixed_capacity() const { return fixed_; }
  WorkingSetInfo info() const;

  // Records that `tokens` fresh tokens were appended by a forward pass (the cache's own commit
  // has run): they are the stream's next tokens.
  void appended(int64_t tokens);
  // Keeps the stream's first `stream_length` tokens. Exact only from exact_stream() on; returns
  // false (and changes nothing) when the cut falls inside what a plan compacted.
  bool truncate(int64_t stream_length);
  // Empties the working set (a rebuild from text).
  void clear();
  // Becomes a copy of `other` (same layout; its slots are copied into this set's own storage, so
  // addresses stay fixed). Captured runs are not copied.
  void assign(const KvWorkingSet& other);

  // The layout without the KV, and the way back: `restore` takes a layout whose KV the caller
  // has already put in slots [0, layout.tokens) at positions 0..n-1 (tokens() must equal it).
  WorkingSetLayout layout() const;
  void restore(const WorkingSetLayout& layout);
  // Slots from 0 whose KV is unchanged since mark_unchanged(): appends keep them, a truncate
  // shortens them, a plan, clear, assign, adopt or restore resets them (an episode written back
  // to the pool rewrites only what changed).
  int64_t unchanged_slots() const { return unchanged_; }
  void mark_unchanged() { unchanged_ = tokens(); }

  // Applies a plan: gathers the kept slots per (layer, head), re-rotates them to 0..n-1 and
  // frees the rest. With capture on, the tokens no run holds yet are copied out first.
  void apply(const KeepPlan& plan, const at::Tensor& inv_freq);

  // Stream index held by each slot: [layers, kv_heads, tokens()] int64 on the CPU; -1 where a
  // ragged plan left a slot empty.
  at::Tensor slot_stream() const;
  // For every stream token, the share of (layer, KV head) lists whose attention still holds it
  // (the memory inspector asks several times a second: the verbatim tail costs no tensor).
  std::vector<float> attention_share() const;
  // Installs a working set restored from the store: `cache` rows hold the KV, `slot_stream`
  // which stream token each slot holds ([L, H, n] or [1, 1, n] when shared; -1: none, the slot is
  // hidden from that head), `stream_tokens` the stream's length.
  void adopt(const KvCache& cache, const at::Tensor& slot_stream, int64_t stream_tokens);

  // Persistence (append-only runs, core/engine/conversation_store.h): tokens from capture_mark()
  // on are not stored yet. With capture on, before a plan overwrites any of them the working set
  // copies them out (they are then contiguous at the end of every layer and head).
  void set_capture(bool enabled) { capture_ = enabled; }
  bool capture() const { return capture_; }
  void capture_from(int64_t stream_index) { capture_from_ = stream_index; }
  int64_t capture_mark() const { return capture_from_; }
  // The runs copied out plus the still-cached tail [last capture, stream end), in stream order,
  // together covering [capture_mark(), stream end). Nothing moves: after the store committed
  // them, mark_stored() drops them. Throws std::logic_error when tokens past the mark left the
  // working set uncaptured (capture was off).
  std::vector<KvRun> pending() const;
  void mark_stored(int64_t stream_end);

  // The highest slot count the working set reached (peak KV per layer).
  int64_t peak_tokens() const { return peak_; }
  void reset_peak() { peak_ = tokens(); }
  void note_peak() { peak_ = std::max(peak_, tokens()); }
  // Stream tokens dropped from attention so far (the sum over plans of the tokens freed, averaged
  // over (layer, KV head) lists).
  int64_t evicted_tokens() const { return evicted_; }

 private:
  KvRun copy_tail(int64_t from_stream) const;
  // With capture on, copies out the tokens no run holds yet (a plan is about to move them).
  void capture_before_plan();
  // Gathers the slots of `index` ([L, H, n] int64 on the cache's device) to slots 0..n-1 of every
  // (layer, head) and re-rotates them to positions 0..n-1.
  void gather_per_head(const at::Tensor& index, const at::Tensor& freq);
  // A plan given as KeepPlan::slots: the index, the slot map and the mask are composed where the
  // cache is; the host reads back two bounds before and three counts after.
  void apply_slots(const at::Tensor& slots, const at::Tensor& inv_freq);
  // The slot map [L, H, tokens()] (-1: no token) on `device`; on the CPU it is slot_stream().
  at::Tensor slot_map_on(at::Device device) const;
  // compacted_ is on the device after a plan given as slots; host readers take a copy made once.
  void set_compacted(at::Tensor map);
  const at::Tensor& compacted_on_host() const;
  void set_slot_map(const at::Tensor& map);  // [L, H, tokens()] int64 CPU
  // The slot map after a plan that pads no slot over slots that all hold a token: each kept slot's
  // stream index read through `index` [L, H, n] (CPU int64) from the map before it, written once
  // (set_slot_map(slot_stream().gather(2, index)) made three passes over [L, H, n]).
  void compose_slot_map(const at::Tensor& index);

  std::unique_ptr<KvCache> owned_;
  KvCache& cache_;
  bool fixed_;
  int64_t max_positions_;
  at::Tensor compacted_;  // [L, H, exact_slot_] int64: stream index of each compacted slot
  mutable at::Tensor compacted_host_;  // its CPU copy, when compacted_ is on the device
  int64_t exact_slot_ = 0;
  int64_t exact_stream_ = 0;
  int64_t stream_end_ = 0;
  bool capture_ = false;
  int64_t capture_from_ = 0;
  std::vector<KvRun> pending_;
  int64_t peak_ = 0;
  int64_t evicted_ = 0;
  int64_t unchanged_ = 0;
};

}  // namespace engram
