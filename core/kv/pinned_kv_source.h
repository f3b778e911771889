// A source whose prefix KV lives in (pinned) host memory and is copied to the device layer by
// layer on the copy stream while earlier layers compute (the layer pipeline of DESIGN.md);
// tokens after the prefix go to a device KvCache. On the CPU the "copy" is a memcpy, so the
// same code path runs in CI.
#pragma once

#include <vector>

#include "core/kv/kv_cache.h"
#include "core/kv/kv_source.h"

namespace engram {

// KV of B rows for every layer in host memory: keys/values [B, kv_heads, P, head_dim].
struct HostKv {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  at::Tensor positions;  // [B, P] int64
  bool dense = true;     // positions are 0..P-1 in every row

  int64_t tokens() const { return positions.defined() ? positions.size(1) : 0; }
  int64_t bytes_per_layer() const;
};

// Copies the first `tokens` slots of every row of `cache` to pinned host memory.
HostKv offload_to_host(const KvCache& cache, int64_t tokens);

class PinnedKvSource : public KvSource {
 public:
  // `tail` receives the fresh tokens; its rows must be empty or continue after the prefix.
  PinnedKvSource(const HostKv& prefix, KvCache& tail, int64_t prefetch_depth = 1);

  void begin_forward(const ForwardContext& ctx) override;
  AttendKv layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) override;
  void end_forward(const ForwardContext& ctx) override;

 private:
  struct InFlight {
    at::Tensor keys;
    at::Tensor values;
    int64_t done_mark = -1;
  };
  void issue_copy(int64_t layer, const ForwardContext& ctx);

  const HostKv& prefix_;
  KvCache& tail_;
  int64_t depth_;
  at::Tensor prefix_positions_;  // on the device
  std::vector<InFlight> in_flight_;
  bool tail_dense_ = true;
  bool dense_after_ = false;
};

}  // namespace engram
