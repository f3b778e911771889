#include "core/policies/text_embedding.h"

#include <algorithm>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "gpu/device_timeline.h"

namespace engram {
namespace {

// Texts per forward: one window is ~50-300 tokens, so a batch stays a small prefill; one forward
// per window was launch-bound on an 8B shape (~15 ms each, 4.4 s for a 20K-token history).
constexpr size_t kBatchRows = 16;

}  // namespace

std::vector<Embedding> embed_texts(const Decoder& decoder, const Tokenizer& tokenizer,
                                   const std::vector<std::string>& texts,
                                   const std::function<void(int64_t done)>& on_progress) {
  const ModelConfig& c = decoder.config();
  std::vector<std::vector<int64_t>> ids(texts.size());
  int64_t skip = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (tokenizer.bos_id() >= 0) ids[i].push_back(tokenizer.bos_id());
    skip = static_cast<int64_t>(ids[i].size());
    for (int32_t id : tokenizer.encode(texts[i]))
      ids[i].push_back(id);
    if (static_cast<int64_t>(ids[i].size()) <= skip)
      throw std::invalid_argument("embed_text: empty text");
    if (static_cast<int64_t>(ids[i].size()) > c.max_positions) ids[i].resize(c.max_positions);
  }
  // Batches of texts of similar length (a stable sort by token count, results put back in the
  // callers' order): a batch is padded to its longest text, and windows of 50-300 tokens in text
  // order padded a batch to about twice its real tokens.
  std::vector<size_t> order(texts.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  std::vector<Embedding> out(texts.size());
  for (size_t first = 0; first < texts.size(); first += kBatchRows) {
    const size_t rows = std::min(kBatchRows, texts.size() - first);
    int64_t longest = 0;
    for (size_t r = 0; r < rows; ++r)
      longest = std::max(longest, static_cast<int64_t>(ids[order[first + r]].size()));
    // Shorter texts are padded after their end (with their last id): causal attention keeps
    // every real token's state exactly what it is alone, and the mean reads only real tokens.
    ForwardRequest req;
    for (size_t r = 0; r < rows; ++r) {
      std::vector<int64_t> row = ids[order[first + r]];
      row.resize(static_cast<size_t>(longest), row.back());
      req.tokens.push_back(std::move(row));
      std::vector<int64_t> positions(static_cast<size_t>(longest));
      for (int64_t i = 0; i < longest; ++i)
        positions[static_cast<size_t>(i)] = i;
      req.positions.push_back(std::move(positions));
    }
    req.final_hidden = true;
    KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim}, static_cast<int64_t>(rows), longest,
                  decoder.dtype(), decoder.device());
    CacheKvSource source(cache);
    gpu::DeviceTimeline timeline(decoder.device());
    const at::Tensor hidden = decoder.forward(req, source, timeline, nullptr).hidden;  // [B, S, D]
    std::vector<at::Tensor> means;
    for (size_t r = 0; r < rows; ++r) {
      const auto n = static_cast<int64_t>(ids[order[first + r]].size());
      means.push_back(
          hidden[static_cast<int64_t>(r)].narrow(0, skip, n - skip).to(at::kFloat).mean(0));
    }
    const at::Tensor all = at::stack(means).to(at::kCPU).contiguous();  // one copy per batch
    for (size_t r = 0; r < rows; ++r) {
      const float* p = all[static_cast<int64_t>(r)].data_ptr<float>();
      Embedding e(p, p + all.size(1));
      normalize(e);
      out[order[first + r]] = std::move(e);
    }
    if (on_progress) on_progress(static_cast<int64_t>(first + rows));
  }
  return out;
}

Embedding embed_text(const Decoder& decoder, const Tokenizer& tokenizer, const std::string& text) {
  return embed_texts(decoder, tokenizer, {text}).front();
}

}  // namespace engram
