#include "core/engine/memory_unit_kv.h"

#include <algorithm>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "gpu/device_timeline.h"
#include "gpu/rope_rotate.h"

namespace engram {
namespace {

KvCacheShape shape_of(const ModelConfig& c) {
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

std::vector<int64_t> positions_from(int64_t first, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    p[static_cast<size_t>(i)] = first + i;
  return p;
}

// Slots [begin, begin + n) of every layer of row 0: [layers, kv_heads, n, head_dim].
std::pair<at::Tensor, at::Tensor> slots_of(const KvCache& cache, int64_t begin, int64_t n) {
  std::vector<at::Tensor> k, v;
  for (int64_t l = 0; l < cache.shape().layers; ++l) {
    k.push_back(cache.keys(l)[0].narrow(1, begin, n));
    v.push_back(cache.values(l)[0].narrow(1, begin, n));
  }
  return {at::stack(k), at::stack(v)};
}

}  // namespace

PrefixKv compute_prefix_kv(const Decoder& decoder, std::vector<int64_t> tokens,
                           int64_t first_position) {
  const ModelConfig& c = decoder.config();
  PrefixKv prefix;
  prefix.first_position = first_position;
  prefix.tokens = std::move(tokens);
  const auto n = static_cast<int64_t>(prefix.tokens.size());
  const auto opts = at::TensorOptions().dtype(decoder.dtype()).device(decoder.device());
  if (n == 0) {
    prefix.keys = at::zeros({c.num_layers, c.num_kv_heads, 0, c.head_dim}, opts);
    prefix.values = prefix.keys.clone();
    return prefix;
  }
  KvCache cache(shape_of(c), 1, n, decoder.dtype(), decoder.device());
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(decoder.device());
  ForwardRequest request;
  request.tokens = {prefix.tokens};
  request.positions = {positions_from(first_position, n)};
  decoder.forward(request, source, timeline, nullptr);
  std::tie(prefix.keys, prefix.values) = slots_of(cache, 0, n);
  return prefix;
}

UnitKv compute_unit_kv(const Decoder& decoder, const PrefixKv& prefix, const MemoryUnit& unit) {
  return std::move(compute_unit_kvs(decoder, prefix, {unit}).front());
}

std::vector<UnitKv> compute_unit_kvs(const Decoder& decoder, const PrefixKv& prefix,
                                     const std::vector<MemoryUnit>& units) {
  std::vector<UnitKv> out;
  if (units.empty()) return out;
  int64_t s = 0;
  for (const MemoryUnit& unit : units) {
    if (unit.tokens.empty())
      throw std::invalid_argument("memory unit '" + unit.key + "' has no tokens");
    s = std::max(s, static_cast<int64_t>(unit.tokens.size()));
  }
  const ModelConfig& c = decoder.config();
  const auto p = static_cast<int64_t>(prefix.tokens.size());
  const auto b = static_cast<int64_t>(units.size());
  KvCache cache(shape_of(c), b, p + s, decoder.dtype(), decoder.device());
  if (p > 0) {
    const at::Tensor pos = at::tensor(positions_from(prefix.first_position, p), at::kLong)
                               .view({1, p})
                               .expand({b, p})
                               .to(decoder.device());
    for (int64_t l = 0; l < c.num_layers; ++l)
      cache.write(l, prefix.keys[l].unsqueeze(0).expand({b, -1, -1, -1}),
                  prefix.values[l].unsqueeze(0).expand({b, -1, -1, -1}), pos);
    cache.commit(p, std::vector<std::vector<int64_t>>(static_cast<size_t>(b),
                                                      positions_from(prefix.first_position, p)));
  }
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(decoder.device());
  ForwardRequest request;
  for (const MemoryUnit& unit : units) {
    // Shorter units are padded after their last token: causal attention keeps the padding out
    // of every real token's KV, and its slots are never read.
    std::vector<int64_t> tokens = unit.tokens;
    tokens.resize(static_cast<size_t>(s), unit.tokens.back());
    request.tokens.push_back(std::move(tokens));
    request.positions.push_back(positions_from(prefix.end_position(), s));
  }
  decoder.forward(request, source, timeline, nullptr);
  for (int64_t r = 0; r < b; ++r) {
    const MemoryUnit& unit = units[static_cast<size_t>(r)];
    const auto n = static_cast<int64_t>(unit.tokens.size());
    UnitKv kv;
    kv.key = unit.key;
    kv.version = unit.version;
    kv.tokens = unit.tokens;
    kv.first_position = prefix.end_position();
    std::vector<at::Tensor> k, v;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      k.push_back(cache.keys(l)[r].narrow(1, p, n));
      v.push_back(cache.values(l)[r].narrow(1, p, n));
    }
    kv.keys = at::stack(k).contiguous();
    kv.values = at::stack(v).contiguous();
    out.push_back(std::move(kv));
  }
  return out;
}

UnitKv move_unit_kv(const UnitKv& kv, int64_t first_position, const at::Tensor& inv_freq) {
  UnitKv moved = kv;
  moved.first_position = first_position;
  moved.keys = kv.keys.clone();
  const int64_t n = kv.keys.size(2);
  if (first_position != kv.first_position && n > 0) {
    const at::Tensor deltas =
        at::full({n}, first_position - kv.first_position,
                 at::TensorOptions().dtype(at::kLong).device(kv.keys.device()));
    gpu::rope_rotate_(moved.keys, deltas, inv_freq.to(kv.keys.device()));
  }
  return moved;
}

const UnitKv& UnitKvStore::get(const Decoder& decoder, const PrefixKv& prefix,
                               const MemoryUnit& unit) {
  auto it = units_.find(unit.key);
  if (it != units_.end() && it->second.version == unit.version &&
      it->second.tokens == unit.tokens && it->second.first_position == prefix.end_position()) {
    ++reused_;
    return it->second;
  }
  ++computed_;
  UnitKv kv = compute_unit_kv(decoder, prefix, unit);
  return units_.insert_or_assign(unit.key, std::move(kv)).first->second;
}

}  // namespace engram
