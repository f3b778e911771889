#include "core/engine/memory_unit_kv.h"

#include <algorithm>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "core/runtime/attention.h"
#include "core/runtime/decoder_layer.h"
#include "core/runtime/rope.h"
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
  if (unit.tokens.empty())
    throw std::invalid_argument("memory unit '" + unit.key + "' has no tokens");
  // The plain prefill over a cache holding the prefix: the reference the packed forward of
  // compute_unit_kvs is tested against.
  const ModelConfig& c = decoder.config();
  const auto p = static_cast<int64_t>(prefix.tokens.size());
  const auto n = static_cast<int64_t>(unit.tokens.size());
  KvCache cache(shape_of(c), 1, p + n, decoder.dtype(), decoder.device());
  if (p > 0) {
    const std::vector<int64_t> prefix_positions = positions_from(prefix.first_position, p);
    const at::Tensor pos =
        at::tensor(prefix_positions, at::kLong).view({1, p}).to(decoder.device());
    for (int64_t l = 0; l < c.num_layers; ++l)
      cache.write(l, prefix.keys[l].unsqueeze(0), prefix.values[l].unsqueeze(0), pos);
    cache.commit(p, {prefix_positions});
  }
  CacheKvSource source(cache);
  gpu::DeviceTimeline timeline(decoder.device());
  ForwardRequest request;
  request.tokens = {unit.tokens};
  request.positions = {positions_from(prefix.end_position(), n)};
  decoder.forward(request, source, timeline, nullptr);
  UnitKv kv;
  kv.key = unit.key;
  kv.version = unit.version;
  kv.tokens = unit.tokens;
  kv.first_position = prefix.end_position();
  std::tie(kv.keys, kv.values) = slots_of(cache, p, n);
  return kv;
}

std::vector<UnitKv> compute_unit_kvs(const Decoder& decoder, const PrefixKv& prefix,
                                     const std::vector<MemoryUnit>& units) {
  std::vector<UnitKv> out;
  if (units.empty()) return out;
  // The units' tokens packed in one row: every projection and the MLP run once over all of them
  // with no padding; attention runs per unit over the prefix's keys and the unit's own.
  std::vector<int64_t> tokens, positions, offsets;
  for (const MemoryUnit& unit : units) {
    if (unit.tokens.empty())
      throw std::invalid_argument("memory unit '" + unit.key + "' has no tokens");
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    tokens.insert(tokens.end(), unit.tokens.begin(), unit.tokens.end());
    const std::vector<int64_t> p =
        positions_from(prefix.end_position(), static_cast<int64_t>(unit.tokens.size()));
    positions.insert(positions.end(), p.begin(), p.end());
  }
  const ModelConfig& c = decoder.config();
  const DecoderWeights& w = decoder.weights();
  const at::Device device = decoder.device();
  const auto total = static_cast<int64_t>(tokens.size());
  const auto p = static_cast<int64_t>(prefix.tokens.size());
  const auto opts = at::TensorOptions().dtype(decoder.dtype()).device(device);
  const at::Tensor q_positions = gpu::upload_indices(positions, device).view({1, total});
  const auto [cos, sin] = decoder.rope().cos_sin(q_positions, decoder.dtype());
  std::vector<at::Tensor> unit_positions;  // the keys' positions each unit attends: prefix, unit
  for (size_t u = 0; u < units.size(); ++u) {
    const auto n = static_cast<int64_t>(units[u].tokens.size());
    unit_positions.push_back(
        gpu::upload_indices(positions_from(prefix.first_position, p + n), device).view({1, -1}));
  }
  at::Tensor keys = at::empty({c.num_layers, c.num_kv_heads, total, c.head_dim}, opts);
  at::Tensor values = at::empty_like(keys);
  const at::Tensor ids = gpu::upload_indices(tokens, device);
  at::Tensor h = w.embed.index_select(0, ids).view({1, total, c.hidden_size});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const at::Tensor prefix_k = prefix.keys[l].unsqueeze(0).to(opts);
    const at::Tensor prefix_v = prefix.values[l].unsqueeze(0).to(opts);
    h = run_decoder_layer(c, w.layers[l], h, [&](const LayerQkv& qkv) {
      const at::Tensor q = Rope::apply(qkv.q, cos, sin);
      const at::Tensor k = Rope::apply(qkv.k, cos, sin);
      keys[l].copy_(k[0]);
      values[l].copy_(qkv.v[0]);
      std::vector<at::Tensor> parts;
      for (size_t u = 0; u < units.size(); ++u) {
        const int64_t first = offsets[u], n = static_cast<int64_t>(units[u].tokens.size());
        // Keys 0..p+n-1 with the queries the last n: causal without a mask.
        const AttendKv kv{at::cat({prefix_k, k.narrow(2, first, n)}, 2),
                          at::cat({prefix_v, qkv.v.narrow(2, first, n)}, 2), unit_positions[u],
                          /*dense_causal=*/true};
        parts.push_back(attention(q.narrow(2, first, n), kv, q_positions.narrow(1, first, n),
                                  c.sliding_window));
      }
      return parts.size() == 1 ? parts.front() : at::cat(parts, 2);
    });
  }
  for (size_t u = 0; u < units.size(); ++u) {
    const MemoryUnit& unit = units[u];
    const auto n = static_cast<int64_t>(unit.tokens.size());
    UnitKv kv;
    kv.key = unit.key;
    kv.version = unit.version;
    kv.tokens = unit.tokens;
    kv.first_position = prefix.end_position();
    kv.keys = keys.narrow(2, offsets[u], n).contiguous();
    kv.values = values.narrow(2, offsets[u], n).contiguous();
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
