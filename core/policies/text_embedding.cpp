#include "core/policies/text_embedding.h"

#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "gpu/device_timeline.h"

namespace engram {

Embedding embed_text(const Decoder& decoder, const Tokenizer& tokenizer, const std::string& text) {
  const ModelConfig& c = decoder.config();
  std::vector<int64_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const size_t skip = ids.size();
  for (int32_t id : tokenizer.encode(text))
    ids.push_back(id);
  if (ids.size() <= skip) throw std::invalid_argument("embed_text: empty text");
  if (static_cast<int64_t>(ids.size()) > c.max_positions) ids.resize(c.max_positions);
  const auto n = static_cast<int64_t>(ids.size());
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, 1, n, decoder.dtype(),
                decoder.device());
  CacheKvSource source(cache);
  ForwardRequest req;
  req.tokens = {ids};
  req.positions = {std::vector<int64_t>(n)};
  for (int64_t i = 0; i < n; ++i)
    req.positions[0][i] = i;
  req.final_hidden = true;
  gpu::DeviceTimeline timeline(decoder.device());
  const at::Tensor hidden = decoder.forward(req, source, timeline, nullptr).hidden;  // [1, n, D]
  const at::Tensor mean = hidden[0]
                              .narrow(0, static_cast<int64_t>(skip), n - static_cast<int64_t>(skip))
                              .to(at::kFloat)
                              .mean(0)
                              .to(at::kCPU)
                              .contiguous();
  Embedding out(mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel());
  normalize(out);
  return out;
}

}  // namespace engram
