#include "core/engine/layer_sensitivity.h"

#include <chrono>
#include <ctime>
#include <optional>
#include <stdexcept>

#include "core/kv/kv_source.h"
#include "core/runtime/device.h"
#include "gpu/device_timeline.h"

namespace engram {
namespace {

// Keeps every forwarded token's KV (one row, token i at position and slot i) and lets a block's
// queries attend to the sink, the `window` tokens before the block and the block itself; no
// window means everything before (the full causal mask). When nothing is cut, both masks hand
// the runtime the same tensors, so the two passes compute the same bits.
class BlockMaskKvSource : public KvSource {
 public:
  BlockMaskKvSource(int64_t layers, int64_t sink, std::optional<int64_t> window, at::Device device)
      : keys_(static_cast<size_t>(layers)),
        values_(static_cast<size_t>(layers)),
        sink_(sink),
        window_(window),
        device_(device) {}

  void begin_forward(const ForwardContext& ctx) override {
    const int64_t start = length_, end = length_ + ctx.fresh_tokens;
    if (ctx.batch != 1 || ctx.positions[0].front() != start)
      throw std::logic_error("BlockMaskKvSource: one row, forwarded in order from position 0");
    const int64_t sink_end = std::min(sink_, start);
    const int64_t recent_begin = window_ ? std::max(sink_end, start - *window_) : sink_end;
    if (recent_begin <= sink_end) {
      visible_ = at::Tensor();
      key_positions_ =
          at::arange(end, at::TensorOptions().dtype(at::kLong).device(device_)).unsqueeze(0);
      return;
    }
    const auto opts = at::TensorOptions().dtype(at::kLong).device(device_);
    visible_ = at::cat({at::arange(sink_end, opts), at::arange(recent_begin, end, opts)});
    key_positions_ = visible_.unsqueeze(0);
  }

  AttendKv layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& /*ctx*/) override {
    at::Tensor& k = keys_[static_cast<size_t>(layer)];
    at::Tensor& v = values_[static_cast<size_t>(layer)];
    k = k.defined() ? at::cat({k, fresh.keys}, 2) : fresh.keys.contiguous();
    v = v.defined() ? at::cat({v, fresh.values}, 2) : fresh.values.contiguous();
    AttendKv out;
    out.key_positions = key_positions_;
    if (!visible_.defined()) {
      out.keys = k;
      out.values = v;
      out.dense_causal = true;
    } else {
      out.keys = k.index_select(2, visible_);
      out.values = v.index_select(2, visible_);
    }
    return out;
  }

  void end_forward(const ForwardContext& ctx) override { length_ += ctx.fresh_tokens; }

  const at::Tensor& keys(int64_t layer) const { return keys_[static_cast<size_t>(layer)]; }

 private:
  std::vector<at::Tensor> keys_;    // per layer [1, Hkv, length, d] after RoPE
  std::vector<at::Tensor> values_;  // per layer [1, Hkv, length, d]
  int64_t sink_;
  std::optional<int64_t> window_;
  at::Device device_;
  int64_t length_ = 0;
  at::Tensor visible_;        // slots the block attends to; undefined: all of them
  at::Tensor key_positions_;  // [1, T]
};

void forward_in_blocks(const Decoder& decoder, const std::vector<int64_t>& tokens, int64_t block,
                       KvSource& source, const std::function<void()>& block_done) {
  gpu::DeviceTimeline timeline(decoder.device());
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t start = 0; start < n; start += block) {
    const int64_t end = std::min(n, start + block);
    ForwardRequest request;
    request.tokens = {std::vector<int64_t>(tokens.begin() + start, tokens.begin() + end)};
    std::vector<int64_t> positions(static_cast<size_t>(end - start));
    for (int64_t i = start; i < end; ++i)
      positions[static_cast<size_t>(i - start)] = i;
    request.positions = {std::move(positions)};
    (void)decoder.forward(request, source, timeline, nullptr);
    block_done();
  }
}

// Mean over KV heads and tokens of cos(a, b) along head_dim, in double. Identical inputs give
// exactly 1: the dot and both squared norms are then the same sum x, and sqrt(x·x) == x.
double mean_cosine(const at::Tensor& a_in, const at::Tensor& b_in) {
  const at::Tensor a = a_in.to(at::kCPU, at::kDouble), b = b_in.to(at::kCPU, at::kDouble);
  const at::Tensor dot = (a * b).sum(-1);
  const at::Tensor na = (a * a).sum(-1), nb = (b * b).sum(-1);
  const at::Tensor denominator = (na * nb).sqrt();
  // Two zero vectors are the same key; one zero vector shares no direction with the other.
  const at::Tensor zero_case = at::where(na.eq(nb), at::ones_like(dot), at::zeros_like(dot));
  const at::Tensor cos =
      at::where(denominator.gt(0), dot / denominator.clamp_min(1e-300), zero_case).clamp(-1, 1);
  return cos.mean().item<double>();
}

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

std::vector<at::Tensor> block_pass_keys(const Decoder& decoder, const std::vector<int64_t>& tokens,
                                        const BlockMask& mask, bool restricted,
                                        const std::function<void()>& block_done) {
  if (tokens.empty()) throw std::invalid_argument("layer calibration: no tokens");
  if (mask.sink < 0 || mask.window < 0 || mask.block < 1)
    throw std::invalid_argument("layer calibration: need sink >= 0, window >= 0, block >= 1");
  const int64_t layers = decoder.config().num_layers;
  if (static_cast<int64_t>(tokens.size()) > decoder.config().max_positions)
    throw std::out_of_range("layer calibration: " + std::to_string(tokens.size()) +
                            " tokens exceed the model's " +
                            std::to_string(decoder.config().max_positions) + " positions");
  BlockMaskKvSource source(layers, mask.sink,
                           restricted ? std::optional<int64_t>(mask.window) : std::nullopt,
                           decoder.device());
  forward_in_blocks(
      decoder, tokens, mask.block, source, block_done ? block_done : [] {});
  std::vector<at::Tensor> keys;
  for (int64_t l = 0; l < layers; ++l)
    keys.push_back(source.keys(l));
  return keys;
}

std::vector<double> measure_key_cosine(const Decoder& decoder, const std::vector<int64_t>& tokens,
                                       const BlockMask& mask,
                                       const CalibrationProgressFn& progress) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t blocks = mask.block > 0 ? (n + mask.block - 1) / mask.block : 0;
  int64_t done = 0;
  const auto block_done = [&] {
    ++done;
    if (progress) progress(done, 2 * blocks);
  };
  const std::vector<at::Tensor> full = block_pass_keys(decoder, tokens, mask, false, block_done);
  const std::vector<at::Tensor> cut = block_pass_keys(decoder, tokens, mask, true, block_done);
  std::vector<double> sigma;
  for (size_t l = 0; l < full.size(); ++l)
    sigma.push_back(mean_cosine(full[l], cut[l]));
  return sigma;
}

LayerCalibration calibrate_layers(const LoadedModel& model, const std::vector<int64_t>& tokens,
                                  int64_t sink, int64_t window, int64_t block,
                                  const CalibrationProgressFn& progress) {
  const BlockMask mask{sink, window, block > 0 ? block : 2 * window};
  if (mask.block < 1) throw std::invalid_argument("layer calibration: block 0 needs window >= 1");
  LayerCalibration c;
  c.model_fingerprint = model.fingerprint;
  c.model_name = model.name;
  c.key_cosine = measure_key_cosine(*model.decoder, tokens, mask, progress);
  c.sink = mask.sink;
  c.window = mask.window;
  c.block = mask.block;
  c.tokens = static_cast<int64_t>(tokens.size());
  c.samples = 1;
  c.date = utc_now_iso8601();
  c.dtype = dtype_short_name(from_scalar_type(model.decoder->dtype()));
  return c;
}

}  // namespace engram
