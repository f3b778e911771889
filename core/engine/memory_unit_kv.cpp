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
                                     const std::vector<MemoryUnit>& units,
                                     const UnitLayerKv& on_layer) {
  std::vector<UnitKv> out;
  if (units.empty()) return out;
  const ModelConfig& c = decoder.config();
  const DecoderWeights& w = decoder.weights();
  const at::Device device = decoder.device();
  const auto opts = at::TensorOptions().dtype(decoder.dtype()).device(device);
  const auto p = static_cast<int64_t>(prefix.tokens.size());
  const auto b = static_cast<int64_t>(units.size());
  int64_t longest = 0;
  for (const MemoryUnit& unit : units) {
    if (unit.tokens.empty())
      throw std::invalid_argument("memory unit '" + unit.key + "' has no tokens");
    longest = std::max(longest, static_cast<int64_t>(unit.tokens.size()));
  }
  // The units' tokens packed in one row: every projection and the MLP run once over all of them
  // with no padding. Attention alone sees them as a batch, unit u's queries padded after its
  // last token in row u, over [prefix | unit] keys padded the same way: the queries are the last
  // `longest` of `width` keys (FlashAttention's causal alignment), so a real query never sees a
  // padded key and one call covers every unit.
  const int64_t width = p + longest;
  std::vector<int64_t> tokens, positions, kv_slots, q_slots;
  for (int64_t u = 0; u < b; ++u) {
    const MemoryUnit& unit = units[static_cast<size_t>(u)];
    tokens.insert(tokens.end(), unit.tokens.begin(), unit.tokens.end());
    for (int64_t t = 0; t < static_cast<int64_t>(unit.tokens.size()); ++t) {
      positions.push_back(prefix.end_position() + t);
      kv_slots.push_back(u * width + p + t);
      q_slots.push_back(u * longest + t);
    }
  }
  const auto total = static_cast<int64_t>(tokens.size());
  // [layers, kv_heads, units · width, head_dim]: a layer's fresh rows land in one index_copy.
  at::Tensor span_k = at::zeros({c.num_layers, c.num_kv_heads, b * width, c.head_dim}, opts);
  at::Tensor span_v = at::zeros_like(span_k);
  for (int64_t u = 0; u < b && p > 0; ++u) {
    span_k.narrow(2, u * width, p).copy_(prefix.keys);
    span_v.narrow(2, u * width, p).copy_(prefix.values);
  }
  const at::Tensor key_positions =
      gpu::upload_indices(positions_from(prefix.first_position, width), device)
          .view({1, width})
          .expand({b, width});
  const at::Tensor padded_positions =
      key_positions.narrow(1, p, longest);  // every row's queries at P..P+longest-1
  const std::pair<at::Tensor, at::Tensor> cos_sin = decoder.rope().cos_sin(
      gpu::upload_indices(positions, device).view({1, total}), decoder.dtype());
  const at::Tensor kv_index = gpu::upload_indices(kv_slots, device);
  const at::Tensor q_index = gpu::upload_indices(q_slots, device);
  at::Tensor h =
      w.embed.index_select(0, gpu::upload_indices(tokens, device)).view({1, total, c.hidden_size});
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  // Stored KV, approximate by design where it is reused: the norms' kernel (last-bit differences
  // from compute_unit_kv's torch expressions) instead of seven launches a norm; RoPE is one kernel
  // bit-equal to its expression.
  const auto rotated = [&](const at::Tensor& x) {
    return Rope::apply(x, cos_sin.first, cos_sin.second);
  };
  const auto as_batch = [&](const at::Tensor& x, int64_t heads, int64_t n) {  // -> [B, heads, n, d]
    return x.view({heads, b, n, d}).permute({1, 0, 2, 3});
  };
  // Every layer writes the same real slots; the padding stays zero, so one buffer serves all.
  at::Tensor padded_q = at::zeros({hq, b * longest, d}, opts);
  std::vector<int64_t> first_slots;
  for (int64_t u = 0; u < b; ++u)
    first_slots.push_back(u * width + p);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const at::Tensor layer_k = span_k[l], layer_v = span_v[l];  // [kv_heads, units · width, d]
    const auto store = [&](const LayerQkv& qkv) {
      layer_k.index_copy_(1, kv_index, rotated(qkv.k)[0]);
      layer_v.index_copy_(1, kv_index, qkv.v[0]);
      if (on_layer) on_layer(l, layer_k, layer_v, first_slots);
    };
    if (l == c.num_layers - 1) {  // only the KV is kept: the last attention and MLP are not run
      store(project_qkv(c, w.layers[l], h, /*fused_norm=*/true));
      break;
    }
    h = run_decoder_layer(
        c, w.layers[l], h,
        [&](const LayerQkv& qkv) {
          store(qkv);
          const at::Tensor q = padded_q.index_copy_(1, q_index, rotated(qkv.q)[0]);
          const AttendKv kv{as_batch(layer_k, hkv, width), as_batch(layer_v, hkv, width),
                            key_positions, /*dense_causal=*/true};
          const at::Tensor o =
              attention(as_batch(q, hq, longest), kv, padded_positions, c.sliding_window);
          return o.permute({1, 0, 2, 3})
              .reshape({hq, b * longest, d})
              .index_select(1, q_index)
              .unsqueeze(0);
        },
        /*fused_norms=*/true);
  }
  for (int64_t u = 0; u < b; ++u) {
    const MemoryUnit& unit = units[static_cast<size_t>(u)];
    const auto n = static_cast<int64_t>(unit.tokens.size());
    UnitKv kv;
    kv.key = unit.key;
    kv.version = unit.version;
    kv.tokens = unit.tokens;
    kv.first_position = prefix.end_position();
    kv.keys = span_k.narrow(2, u * width + p, n).contiguous();
    kv.values = span_v.narrow(2, u * width + p, n).contiguous();
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
