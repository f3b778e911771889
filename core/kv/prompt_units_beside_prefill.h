// Decode-time retrieval's prompt work done beside the prefill (LouisKV §4: "This KV clustering and
// offloading process occurs asynchronously with the prefill forward pass"). As the prefill's last
// block finishes a layer, that layer's prompt keys are final: a gpu::SideWorker turns them into
// the policy's units (LouisKV's k-means, which reads a count back every round; Quest's pages) and,
// with `stage`, copies the layer into the working set's host slab (KvCache::stage_layer), while the
// prefill computes the next layers. The retrieval source built after the first token then takes
// the units as they are (RetrievalKvSource's `ready`), so the clustering no longer delays the
// reply's second token.
//
// Only for a working set the prefill leaves as it is (an unbounded prefill policy): a plan after
// the block would change the slots the units index. The policy's prompt_units() runs on the
// worker thread; nothing else may use the policy until finish().
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/policies/retrieval_policy.h"
#include "gpu/side_worker.h"

namespace engram {

class PromptUnitsBesidePrefill {
 public:
  PromptUnitsBesidePrefill(RetrievalPolicy& policy, KvCache& working, bool stage);
  // Without finish(): the queued layers are skipped, the worker joined, a staging dropped.
  ~PromptUnitsBesidePrefill();

  // From the prefill's last block, once layer `layer` of the working set holds its final KV:
  // `keys` [H, n, d] is the layer's view over the working set's n slots after the block.
  void layer_ready(int64_t layer, const at::Tensor& keys);

  struct Built {
    std::vector<PromptUnits> units;  // per layer; undefined `order`: not built
    int64_t tokens = 0;              // the n they were built for
    bool staged = false;   // every retrieval layer is in the host slab: use_staged_layers()
    double worker_ms = 0;  // host time of the worker's tasks (beside the prefill)
    double wait_ms = 0;    // what finish() waited for them (after the prefill)
  };
  // Waits for the worker and orders the current stream after its device work; rethrows its error.
  Built finish();

 private:
  RetrievalPolicy& policy_;
  KvCache& working_;
  bool stage_;
  int64_t layers_;
  int64_t full_layers_;
  gpu::SideWorker worker_;
  Built built_;         // written by the worker until finish()
  int64_t staged_ = 0;  // layers staged (worker)
  bool began_ = false;  // begin_staging done (worker)
  bool finished_ = false;
  std::atomic<bool> abandoned_{false};
};

}  // namespace engram
