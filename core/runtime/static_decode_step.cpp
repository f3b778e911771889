#include "core/runtime/static_decode_step.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/runtime/decoder_layer.h"
#include "gpu/rope_kv_write.h"

namespace engram {

StaticDecodeStep::StaticDecodeStep(const Decoder& decoder, KvCache& cache)
    : decoder_(decoder), cache_(cache), graph_(decoder.device()) {
  if (cache.batch() != 1)
    throw std::invalid_argument("StaticDecodeStep: the cache must have one row");
  if (cache.device() != decoder.device() || cache.dtype() != decoder.dtype()) {
    throw std::invalid_argument("StaticDecodeStep: cache and decoder differ in device or dtype");
  }
  const auto on_device = at::TensorOptions().device(decoder.device());
  inputs_ = at::zeros({3}, on_device.dtype(at::kLong));
  logits_ = at::zeros({decoder.config().vocab_size}, on_device.dtype(at::kFloat));
  next_id_ = at::zeros({}, on_device.dtype(at::kLong));
}

const at::Tensor& StaticDecodeStep::step(int64_t token, int64_t position) {
  const ModelConfig& c = decoder_.config();
  if (token < 0 || token >= c.vocab_size) {
    throw std::out_of_range("token id " + std::to_string(token) + " outside the vocabulary of " +
                            std::to_string(c.vocab_size));
  }
  if (position < 0 || position >= c.max_positions) {
    throw std::out_of_range("position " + std::to_string(position) +
                            " is past the model's maximum of " + std::to_string(c.max_positions) +
                            " positions");
  }
  cache_.ensure_room(1);
  const int64_t slot = cache_.lengths()[0];
  // Staged in pinned memory so that the copy is asynchronous; the caching host allocator keeps
  // the block until the copy has run.
  at::Tensor staged = at::empty(
      {3}, at::TensorOptions().dtype(at::kLong).pinned_memory(decoder_.device().is_cuda()));
  int64_t* s = staged.data_ptr<int64_t>();
  s[0] = token;
  s[1] = position;
  s[2] = slot;
  inputs_.copy_(staged, /*non_blocking=*/true);

  const at::Tensor full_keys = cache_.keys(0, cache_.capacity() - cache_.max_length());
  const at::Tensor valid = cache_.key_valid(0);
  const void* valid_storage = valid.defined() ? valid.data_ptr() : nullptr;
  if (cache_.capacity() != recorded_capacity_ || full_keys.data_ptr() != recorded_storage_ ||
      valid_storage != recorded_valid_) {
    record();
  }
  graph_.replay();
  cache_.commit(1, {{position}});
  return logits_;
}

int64_t StaticDecodeStep::greedy_token() const {
  return next_id_.item<int64_t>();
}

void StaticDecodeStep::record() {
  const ModelConfig& c = decoder_.config();
  const int64_t capacity = cache_.capacity();
  const int64_t used = cache_.max_length();
  const int64_t extra = capacity - used;
  keys_.clear();
  values_.clear();
  key_valid_.clear();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    keys_.push_back(cache_.keys(l, extra).select(0, 0));
    values_.push_back(cache_.values(l, extra).select(0, 0));
    // A ragged working set's per-head validity, read in place at every replay.
    const at::Tensor valid = cache_.key_valid(l, extra);
    key_valid_.push_back(valid.defined() ? valid.select(0, 0) : valid);
  }
  key_positions_ = cache_.positions(extra);
  // Attention reads every slot: unwritten ones hold whatever the allocator left, and a NaN there
  // would survive a zero probability (0 · NaN). Their positions are -1, so they stay masked.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    keys_[l].narrow(1, used, extra).zero_();
    values_[l].narrow(1, used, extra).zero_();
  }
  key_positions_.narrow(1, used, extra).fill_(-1);
  // On CUDA the warm-up run writes the current token's KV at its slot, as the replay will.
  graph_.capture([this] { run(); });
  recorded_capacity_ = capacity;
  recorded_storage_ = keys_[0].data_ptr();
  recorded_valid_ = key_valid_[0].defined() ? key_valid_[0].data_ptr() : nullptr;
  ++recordings_;
}

void StaticDecodeStep::run() {
  const ModelConfig& c = decoder_.config();
  const DecoderWeights& weights = decoder_.weights();
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim, g = hq / hkv;
  const int64_t capacity = key_positions_.size(1);
  const at::ScalarType dtype = decoder_.dtype();

  const at::Tensor token = inputs_.narrow(0, 0, 1);
  const at::Tensor position = inputs_.narrow(0, 1, 1);
  const at::Tensor slot = inputs_.narrow(0, 2, 1);

  key_positions_.index_copy_(1, slot, position.view({1, 1}));
  const at::Tensor key_pos = key_positions_.view({capacity});
  at::Tensor visible = key_pos.ge(0).logical_and(key_pos.le(position));
  if (c.sliding_window) visible = visible.logical_and(key_pos.gt(position - *c.sliding_window));
  // Additive mask over the capacity, folded into the score matmul (baddbmm); per KV head when a
  // ragged working set hides slots from some heads (as attention() does with key_valid).
  const auto bias_options = at::TensorOptions().dtype(dtype).device(decoder_.device());
  const auto mask_bias_of = [&](const at::Tensor& valid) {
    if (!valid.defined()) {
      return at::zeros({1, 1, capacity}, bias_options)
          .masked_fill_(visible.logical_not().view({1, 1, capacity}),
                        -std::numeric_limits<double>::infinity());
    }
    return at::zeros({hkv, 1, capacity}, bias_options)
        .masked_fill_(visible.view({1, 1, capacity})
                          .logical_and(valid.view({hkv, 1, capacity}))
                          .logical_not(),
                      -std::numeric_limits<double>::infinity());
  };
  const at::Tensor shared_bias = key_valid_[0].defined() ? at::Tensor() : mask_bias_of({});
  auto [cos, sin] = decoder_.rope().cos_sin(position.view({1, 1}), dtype);
  cos = cos.reshape({hd});
  sin = sin.reshape({hd});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  at::Tensor h = weights.embed.index_select(0, token).view({1, 1, c.hidden_size});
  for (int64_t li = 0; li < c.num_layers; ++li) {
    h = run_decoder_layer(c, weights.layers[li], h, [&](const LayerQkv& p) {
      // The fused kernel rotates q and k and writes k, v at the device slot of the working set.
      at::Tensor q_rot = at::empty({hq, hd}, p.q.options());
      gpu::rope_kv_write(p.q.reshape({hq, hd}), p.k.reshape({hkv, hd}), p.v.reshape({hkv, hd}), cos,
                         sin, slot, q_rot, keys_[li], values_[li]);
      // Grouped-query attention without repeating KV heads: the g query heads of a KV head are
      // rows of one matmul. Softmax in f32, as the per-layer path and transformers do.
      const at::Tensor mask_bias =
          shared_bias.defined() ? shared_bias : mask_bias_of(key_valid_[li]);
      const at::Tensor scores =
          at::baddbmm(mask_bias, q_rot.view({hkv, g, hd}), keys_[li].transpose(1, 2), 1.0, scale);
      const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(dtype);
      return at::bmm(probs, values_[li]).view({1, hq, 1, hd});
    });
  }
  logits_.copy_(decoder_logits(c, weights, h).view({-1}));
  next_id_.copy_(logits_.argmax());
}

}  // namespace engram
