#include "core/kv/cache_kv_source.h"

namespace engram {

void CacheKvSource::begin_forward(const ForwardContext& ctx) {
  cache_.ensure_room(ctx.fresh_tokens);
  // The cache stays dense when every row continues at its own length from position 0.
  dense_after_ = cache_.dense();
  for (int64_t b = 0; b < ctx.batch && dense_after_; ++b) {
    for (int64_t s = 0; s < ctx.fresh_tokens; ++s) {
      if (ctx.positions[b][s] != cache_.lengths()[b] + s) dense_after_ = false;
    }
  }
}

AttendKv CacheKvSource::layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) {
  cache_.write(layer, fresh.keys, fresh.values, fresh.positions);
  AttendKv out;
  out.keys = cache_.keys(layer, ctx.fresh_tokens);
  out.values = cache_.values(layer, ctx.fresh_tokens);
  out.key_positions = cache_.positions(ctx.fresh_tokens);
  out.key_valid = cache_.key_valid(layer, ctx.fresh_tokens);
  out.key_valid_suffix = out.key_valid.defined() && cache_.key_valid_suffix();
  out.dense_causal = dense_after_;
  return out;
}

void CacheKvSource::end_forward(const ForwardContext& ctx) {
  cache_.commit(ctx.fresh_tokens, ctx.positions);
}

}  // namespace engram
