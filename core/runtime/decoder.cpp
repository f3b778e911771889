#include "core/runtime/decoder.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <stdexcept>
#include <string>

#include "core/runtime/attention.h"
#include "core/runtime/decoder_layer.h"
#include "core/trace/trace_recorder.h"
#include "gpu/decode_linear.h"

namespace engram {
namespace {

at::Tensor to_device_ids(const std::vector<std::vector<int64_t>>& rows, at::Device device) {
  const int64_t b = static_cast<int64_t>(rows.size());
  const int64_t s = b ? static_cast<int64_t>(rows[0].size()) : 0;
  std::vector<int64_t> flat;
  flat.reserve(b * s);
  for (const auto& r : rows) {
    if (static_cast<int64_t>(r.size()) != s) {
      throw std::invalid_argument("forward: every row must have the same number of tokens");
    }
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return at::tensor(flat, at::kLong).view({b, s}).to(device);
}

}  // namespace

Decoder::Decoder(ModelConfig config, DecoderWeights weights, at::Device device,
                 at::ScalarType dtype)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      device_(device),
      dtype_(dtype),
      rope_(config_, device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  // cuDNN's attention builds an execution plan for every new (query, key) length pair, about
  // 0.7 s each on an H100/H200 (measured: bench/results/2026-11-25-h200-oxygen-graph), and a
  // prefill over kept KV (a chat turn, an OxyGen frame) is a new pair almost every time. Flash
  // and memory-efficient attention take any length without a plan.
  if (device.is_cuda()) at::globalContext().setSDPUseCuDNN(false);
#endif
}

ForwardResult Decoder::forward(const ForwardRequest& req, KvSource& source,
                               gpu::DeviceTimeline& timeline, TraceRecorder* trace) const {
  const ModelConfig& c = config_;
  const int64_t b = static_cast<int64_t>(req.tokens.size());
  const int64_t s = b ? static_cast<int64_t>(req.tokens[0].size()) : 0;
  if (b == 0 || s == 0) throw std::invalid_argument("forward: no tokens");
  if (req.positions.size() != req.tokens.size()) {
    throw std::invalid_argument("forward: positions and tokens differ in rows");
  }
  for (const auto& row : req.positions) {
    for (int64_t p : row) {
      if (p < 0 || p >= c.max_positions) {
        throw std::out_of_range("position " + std::to_string(p) +
                                " is past the model's maximum of " +
                                std::to_string(c.max_positions) + " positions");
      }
    }
  }
  for (const auto& row : req.tokens) {
    for (int64_t t : row) {
      if (t < 0 || t >= c.vocab_size) {
        throw std::out_of_range("token id " + std::to_string(t) + " outside the vocabulary of " +
                                std::to_string(c.vocab_size));
      }
    }
  }

  ForwardContext ctx;
  ctx.batch = b;
  ctx.fresh_tokens = s;
  ctx.positions = req.positions;
  ctx.timeline = &timeline;
  ctx.trace = trace;

  const at::Tensor ids = to_device_ids(req.tokens, device_);
  const at::Tensor positions = to_device_ids(req.positions, device_);
  auto [cos, sin] = rope_.cos_sin(positions, dtype_);
  at::Tensor probe_index;
  at::Tensor probe_positions;
  if (!req.probe_rows.empty()) {
    probe_index = at::tensor(req.probe_rows, at::kLong).to(device_);
    probe_positions = positions.index_select(1, probe_index);
  }
  source.begin_forward(ctx);
  at::Tensor h = weights_.embed.index_select(0, ids.view({-1})).view({b, s, c.hidden_size});
  for (int64_t li = 0; li < c.num_layers; ++li) {
    TraceRecorder::Open open;
    if (trace) open = trace->begin(li, TraceLane::kCompute, "layer");
    h = run_decoder_layer(c, weights_.layers[li], h, [&](const LayerQkv& p) {
      const at::Tensor q = Rope::apply(p.q, cos, sin);
      const at::Tensor k = Rope::apply(p.k, cos, sin);
      FreshKv fresh{k, p.v.contiguous(), positions, q};
      const AttendKv kv = source.layer_kv(li, fresh, ctx);
      at::Tensor attn = attention(q, kv, positions, c.sliding_window);
      if (req.on_layer) {
        LayerView view{li,  req.phase, p.input,      q,         k,
                       p.v, kv,        at::Tensor(), positions, c.sliding_window};
        if (probe_index.defined()) {
          view.probs = attention_probabilities(q.index_select(2, probe_index), kv, probe_positions,
                                               c.sliding_window);
        }
        req.on_layer(view);
      }
      return attn;
    });
    if (trace) trace->end(open, b * s);
  }
  source.end_forward(ctx);

  TraceRecorder::Open head;
  if (trace) head = trace->begin(-1, TraceLane::kCompute, "lm_head");
  ForwardResult result;
  if (s == 1 && !req.final_hidden) {
    // A decode forward's head streams the weights with the final norm folded in
    // (gpu/decode_linear.h).
    result.logits = decoder_logits(c, weights_, h);
  } else {
    at::Tensor normed = decoder_rms_norm(c, h, weights_.final_norm);
    at::Tensor last = req.all_logits ? normed : normed.narrow(1, s - 1, 1);
    // A prefill's last row keeps cuBLAS, as transformers computes it.
    result.logits = (s == 1 ? gpu::decode_linear(last, weights_.lm_head, {})
                            : at::linear(last, weights_.lm_head))
                        .to(at::kFloat);
    if (req.final_hidden) result.hidden = normed;
  }
  if (trace) trace->end(head, b * (req.all_logits ? s : 1));
  return result;
}

}  // namespace engram
