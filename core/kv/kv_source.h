// The seam between the model runtime and the memory policies (DESIGN.md, "Runtime pieces"): at
// every layer the forward pass hands the fresh keys/values of the tokens it computes to a
// KvSource and attends to whatever the source returns. A source may append to a cache, fuse
// cached and fresh KV, or fetch a layer's KV from CPU memory while earlier layers compute.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace engram {

namespace gpu {
class DeviceTimeline;
}
class TraceRecorder;

// What one forward pass computes: B rows of S fresh tokens each.
struct ForwardContext {
  int64_t batch = 0;
  int64_t fresh_tokens = 0;                     // S
  std::vector<std::vector<int64_t>> positions;  // [B][S], host copy of the RoPE positions
  gpu::DeviceTimeline* timeline = nullptr;      // always set by the runtime
  TraceRecorder* trace = nullptr;               // null when not tracing
};

// Fresh KV of one layer: keys after RoPE. Shapes [B, kv_heads, S, head_dim]; positions [B, S].
// The queries ([B, heads, S, head_dim], after RoPE) are there for sources that choose what to
// attend to from them (decode-time retrieval, core/kv/retrieval_kv_source.h).
struct FreshKv {
  at::Tensor keys;
  at::Tensor values;
  at::Tensor positions;
  at::Tensor queries;
};

// What the queries of one layer attend to. keys/values [B, kv_heads, T, head_dim];
// key_positions [B, T] int64 with -1 for empty slots. A query at position p sees a key at
// position k when 0 <= k <= p (and inside the sliding window, if any): masking is exact by
// position, whatever order the keys are in. key_valid [B, kv_heads, T] bool further hides a slot
// from one KV head (and its query heads) only: a ragged working set, whose (layer, head) lists
// keep different numbers of tokens, pads the shorter ones. Undefined = every slot is valid (the
// common case, which keeps the unmasked fast paths).
struct AttendKv {
  at::Tensor keys;
  at::Tensor values;
  at::Tensor key_positions;
  // True when every row's keys are at positions 0..T-1 in order and the queries are the last S
  // of them: the runtime may then use a plain causal kernel instead of an explicit mask.
  bool dense_causal = false;
  at::Tensor key_valid;
  // Optional: the queries' mask [B, 1, S, T], kept by a caller whose same rows attend at several
  // layers (KEEP's recomputed rows); built from the positions (and key_valid) when undefined.
  at::Tensor mask;
  // With key_valid: each KV head's hidden slots precede all its valid ones (a ragged working set
  // pads its shorter lists in front: core/kv/working_set.cpp). A CUDA prefill block then reads
  // each head's valid keys in place as one variable-length sequence instead of through a mask.
  bool key_valid_suffix = false;
};

enum class ForwardPhase : uint8_t { kPrefill, kDecode };

// What one layer computed, for policies that score tokens. Shapes as in Decoder::forward.
struct LayerView {
  int64_t layer = 0;
  ForwardPhase phase = ForwardPhase::kPrefill;
  at::Tensor input;      // [B, S, hidden] the layer's input (before its RMSNorm)
  at::Tensor q;          // [B, Hq, S, d] after RoPE
  at::Tensor k;          // [B, Hkv, S, d] after RoPE (fresh tokens)
  at::Tensor v;          // [B, Hkv, S, d]
  AttendKv kv;           // what the queries attended to (working set + fresh)
  at::Tensor probs;      // [B, Hq, R, T] f32 for the requested rows; undefined when none were asked
  at::Tensor positions;  // [B, S] the rows' positions
  std::optional<int64_t> window;  // the model's sliding window, if any
};

class KvSource {
 public:
  virtual ~KvSource() = default;
  virtual void begin_forward(const ForwardContext& /*ctx*/) {}
  virtual AttendKv layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) = 0;
  virtual void end_forward(const ForwardContext& /*ctx*/) {}
};

}  // namespace engram
