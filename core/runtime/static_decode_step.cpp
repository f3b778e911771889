#include "core/runtime/static_decode_step.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/kv/retrieval_kv_source.h"
#include "core/runtime/decoder_layer.h"
#include "gpu/argmax_rows.h"
#include "gpu/decode_attention.h"
#include "gpu/rope_kv_write.h"

namespace engram {

int64_t recorded_capacity(int64_t slots) {
  const int64_t roomy = slots + slots / 4;
  return (roomy + 255) / 256 * 256;
}

StaticDecodeStep::StaticDecodeStep(const Decoder& decoder, KvCache& cache)
    : decoder_(decoder),
      cache_(&cache),
      recorded_{Recording(decoder.device()), Recording(decoder.device())},
      greedy_vocab_(decoder.config().vocab_size) {
  bind(cache);
}

void StaticDecodeStep::set_greedy_vocab(int64_t limit) {
  const int64_t vocab = decoder_.config().vocab_size;
  greedy_vocab_ = limit > 0 && limit < vocab ? limit : vocab;
}

void StaticDecodeStep::bind(KvCache& cache) {
  if (cache.device() != decoder_.device() || cache.dtype() != decoder_.dtype()) {
    throw std::invalid_argument("StaticDecodeStep: cache and decoder differ in device or dtype");
  }
  // Another cache object can sit where a destroyed one was only by chance: replayed over only when
  // every address the recording reads is the same (its storage check covers layer 0's keys).
  if (cache_ != &cache) {
    for (Recording& r : recorded_) {
      if (!r.addresses.empty() && addresses(cache) != r.addresses) r.capacity = -1;
    }
  }
  cache_ = &cache;
  const int64_t rows = cache.batch();
  if (rows == recorded_rows_) return;  // the buffers fit; the storage check decides re-recording
  const auto on_device = at::TensorOptions().device(decoder_.device());
  inputs_ = at::zeros({3, rows}, on_device.dtype(at::kLong));
  logits_ = at::zeros({rows, decoder_.config().vocab_size}, on_device.dtype(at::kFloat));
  row0_logits_ = logits_[0];
  next_id_ = at::zeros({rows}, on_device.dtype(at::kLong));
  recorded_rows_ = rows;
  for (Recording& r : recorded_)
    r.capacity = -1;  // new buffers: record again
}

void StaticDecodeStep::attach(RetrievalKvSource* source) {
  if (source && (cache_->batch() != 1 || !source->recordable()))
    throw std::invalid_argument(
        "StaticDecodeStep::attach: a one-row cache and a recordable source");
  retrieval_ = source;
}

const at::Tensor& StaticDecodeStep::step(int64_t token, int64_t position) {
  if (cache_->batch() != 1) throw std::invalid_argument("StaticDecodeStep::step: one-row cache");
  step_rows({token}, {position}, {true});
  return row0_logits_;
}

const at::Tensor& StaticDecodeStep::step_rows(const std::vector<int64_t>& tokens,
                                              const std::vector<int64_t>& positions,
                                              const std::vector<bool>& advance) {
  const ModelConfig& c = decoder_.config();
  KvCache& cache = *cache_;
  const int64_t rows = cache.batch();
  if (static_cast<int64_t>(tokens.size()) != rows ||
      static_cast<int64_t>(positions.size()) != rows ||
      static_cast<int64_t>(advance.size()) != rows) {
    throw std::invalid_argument("StaticDecodeStep: one token, position and flag per row");
  }
  for (int64_t b = 0; b < rows; ++b) {
    if (tokens[b] < 0 || tokens[b] >= c.vocab_size) {
      throw std::out_of_range("token id " + std::to_string(tokens[b]) +
                              " outside the vocabulary of " + std::to_string(c.vocab_size));
    }
    if (positions[b] < 0 || positions[b] >= c.max_positions) {
      throw std::out_of_range("position " + std::to_string(positions[b]) +
                              " is past the model's maximum of " + std::to_string(c.max_positions) +
                              " positions");
    }
  }
  // Every row writes at its length (a row not advanced: a scratch slot), so the longest needs one.
  cache.ensure_room(1);
  // Staged in pinned memory so that the copy is asynchronous; the caching host allocator keeps
  // the block until the copy has run.
  at::Tensor staged = at::empty(
      {3, rows}, at::TensorOptions().dtype(at::kLong).pinned_memory(decoder_.device().is_cuda()));
  int64_t* s = staged.data_ptr<int64_t>();
  for (int64_t b = 0; b < rows; ++b) {
    s[b] = tokens[b];
    s[rows + b] = positions[b];
    s[2 * rows + b] = cache.lengths()[b];
  }
  inputs_.copy_(staged, /*non_blocking=*/true);
  if (retrieval_) retrieval_->before_recorded_step();

  const at::Tensor full_keys = cache.keys(0, cache.capacity() - cache.max_length());
  const at::Tensor valid = cache.key_valid(0);
  const void* valid_storage = valid.defined() ? valid.data_ptr() : nullptr;
  const int64_t retrieval_version = retrieval_ ? retrieval_->recording_version() : -1;
  Recording& r = recorded_[retrieval_ && retrieval_->idle_step() ? 1 : 0];
  bool ran = false;
  if (cache.capacity() != r.capacity || full_keys.data_ptr() != r.storage ||
      cache.storage_version() != r.storage_version || valid_storage != r.valid ||
      retrieval_ != r.retrieval || retrieval_version != r.retrieval_version ||
      greedy_vocab_ != r.greedy_vocab) {
    ran = record(r);
  }
  // The recorded work is not idempotent with a retrieval source (a policy's previous queries), so
  // a capture's warm-up counts as this step's run.
  if (!ran) r.graph.replay();
  if (retrieval_) retrieval_->after_recorded_step();
  for (int64_t b = 0; b < rows; ++b) {
    if (advance[b]) cache.commit_row(b, positions[b]);
  }
  return logits_;
}

int64_t StaticDecodeStep::greedy_token() const {
  return next_id_[0].item<int64_t>();
}

std::vector<int64_t> StaticDecodeStep::greedy_tokens() const {
  const at::Tensor ids = next_id_.to(at::kCPU);
  const int64_t* p = ids.data_ptr<int64_t>();
  return {p, p + ids.numel()};
}

bool StaticDecodeStep::record(Recording& r) {
  const ModelConfig& c = decoder_.config();
  KvCache& cache = *cache_;
  const int64_t capacity = cache.capacity();
  const int64_t used = cache.max_length();
  const int64_t extra = capacity - used;
  keys_.clear();
  values_.clear();
  key_valid_.clear();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    keys_.push_back(cache.keys(l, extra));
    values_.push_back(cache.values(l, extra));
    // A ragged working set's per-head validity, read in place at every replay.
    key_valid_.push_back(cache.key_valid(l, extra));
  }
  key_positions_ = cache.positions(extra);
  // Attention reads every slot: unwritten ones hold whatever the allocator left, and a NaN there
  // would survive a zero probability (0 · NaN). Their positions are -1, so they stay masked.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    keys_[l].narrow(2, used, extra).zero_();
    values_[l].narrow(2, used, extra).zero_();
  }
  key_positions_.narrow(1, used, extra).fill_(-1);
  // On CUDA the warm-up run writes the current tokens' KV at their slots, as the replay will.
  r.graph.capture([this] { run(); });
  r.capacity = capacity;
  r.storage = keys_[0].data_ptr();
  r.storage_version = cache.storage_version();
  r.valid = key_valid_[0].defined() ? key_valid_[0].data_ptr() : nullptr;
  r.addresses = addresses(cache);
  r.retrieval = retrieval_;
  r.retrieval_version = retrieval_ ? retrieval_->recording_version() : -1;
  r.greedy_vocab = greedy_vocab_;
  ++recordings_;
  return r.graph.is_cuda();
}

std::vector<const void*> StaticDecodeStep::addresses(const KvCache& cache) const {
  std::vector<const void*> out;
  const int64_t extra = cache.capacity() - cache.max_length();
  for (int64_t l = 0; l < cache.shape().layers; ++l) {
    const at::Tensor valid = cache.key_valid(l, extra);
    out.insert(out.end(), {cache.keys(l, extra).data_ptr(), cache.values(l, extra).data_ptr(),
                           valid.defined() ? valid.data_ptr() : nullptr});
  }
  out.push_back(cache.positions(extra).data_ptr());
  out.push_back(reinterpret_cast<const void*>(cache.capacity()));
  return out;
}

void StaticDecodeStep::run() {
  const ModelConfig& c = decoder_.config();
  const DecoderWeights& weights = decoder_.weights();
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  const int64_t rows = key_positions_.size(0);
  const at::ScalarType dtype = decoder_.dtype();

  const at::Tensor token = inputs_[0];
  const at::Tensor position = inputs_[1].view({rows, 1});
  const at::Tensor slot = inputs_[2].view({rows, 1});

  key_positions_.scatter_(1, slot, position);
  // Attention reads each row's slots up to the one it writes (gpu::decode_attention): the
  // capacity recorded for growth costs nothing until it is used.
  const at::Tensor row_positions = inputs_[1];
  const at::Tensor last_slots = inputs_[2];
  const int64_t window = c.sliding_window ? *c.sliding_window : 0;
  auto [cos, sin] = decoder_.rope().cos_sin(position, dtype);  // [rows, 1, 1, hd]
  cos = cos.reshape({rows, hd});
  sin = sin.reshape({rows, hd});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  at::Tensor h = weights.embed.index_select(0, token).view({rows, 1, c.hidden_size});
  for (int64_t li = 0; li < c.num_layers; ++li) {
    h = run_decoder_layer(c, weights.layers[li], h, [&](const LayerQkv& p) {
      // The fused kernel rotates q and k and writes k, v at each row's device slot.
      at::Tensor q_rot = at::empty({rows, hq, hd}, p.q.options());
      for (int64_t b = 0; b < rows; ++b) {
        at::Tensor q_out = q_rot[b];
        at::Tensor key_rows = keys_[li][b];
        at::Tensor value_rows = values_[li][b];
        gpu::rope_kv_write(p.q[b].reshape({hq, hd}), p.k[b].reshape({hkv, hd}),
                           p.v[b].reshape({hkv, hd}), cos[b], sin[b], slot[b], q_out, key_rows,
                           value_rows);
      }
      if (retrieval_ && retrieval_->retrieves_at(li)) {
        return retrieval_
            ->recorded_layer(li, q_rot, p.q[0].reshape({hq, hd}), p.k[0].reshape({hkv, hd}),
                             p.v[0].reshape({hkv, hd}), cos[0], sin[0], row_positions, window,
                             scale)
            .view({rows, hq, 1, hd});
      }
      return gpu::decode_attention(q_rot, keys_[li], values_[li], key_positions_, key_valid_[li],
                                   row_positions, last_slots, window, scale)
          .view({rows, hq, 1, hd});
    });
  }
  logits_.copy_(decoder_logits(c, weights, h).view({rows, -1}));
  gpu::argmax_rows(logits_.narrow(1, 0, greedy_vocab_), next_id_);
}

}  // namespace engram
