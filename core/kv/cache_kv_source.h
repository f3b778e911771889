// The plain source: fresh KV is appended to a KvCache and the queries attend to everything the
// cache holds for their rows. Full recomputation and ordinary incremental decode use it.
#pragma once

#include "core/kv/kv_cache.h"
#include "core/kv/kv_source.h"

namespace engram {

class CacheKvSource : public KvSource {
 public:
  explicit CacheKvSource(KvCache& cache) : cache_(cache) {}
  void begin_forward(const ForwardContext& ctx) override;
  AttendKv layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) override;
  void end_forward(const ForwardContext& ctx) override;

 private:
  KvCache& cache_;
  bool dense_after_ = false;
};

}  // namespace engram
