#include "core/kv/prompt_units_beside_prefill.h"

#include <chrono>
#include <stdexcept>

#include "core/kv/retrieval_kv_source.h"

namespace engram {

PromptUnitsBesidePrefill::PromptUnitsBesidePrefill(RetrievalPolicy& policy, KvCache& working,
                                                   bool stage)
    : policy_(policy),
      working_(working),
      stage_(stage),
      layers_(static_cast<int64_t>(working.shape().layers)),
      full_layers_(policy.settings().full_layers),
      worker_(working.device()) {
  built_.units.resize(static_cast<size_t>(layers_));
}

PromptUnitsBesidePrefill::~PromptUnitsBesidePrefill() {
  if (finished_) return;
  abandoned_ = true;
  try {
    worker_.join();
  } catch (...) {  // nothing made is used
  }
  if (began_) working_.drop_staged();
}

void PromptUnitsBesidePrefill::layer_ready(int64_t layer, const at::Tensor& keys) {
  if (layer < full_layers_ || layer >= layers_) return;  // full layers attend the working set
  const int64_t n = keys.size(1);
  const at::Tensor prompt = retrieval_prompt_keys(keys, policy_.settings().sinks);
  built_.tokens = n;  // the worker never reads it
  worker_.submit([this, layer, prompt] {
    if (abandoned_) return;
    const auto t0 = std::chrono::steady_clock::now();
    if (stage_) {
      if (!began_) {
        // The slab is allocated here, off the prefill's thread (page-locking GBs takes time).
        working_.begin_staging(retrieval_layer_ids(policy_.settings(), layers_));
        began_ = true;
      }
      working_.stage_layer(layer);  // queued before the clustering on the worker's stream
      ++staged_;
    }
    if (prompt.size(1) > 0) {
      built_.units[static_cast<size_t>(layer)] = policy_.prompt_units(layer, prompt);
    }
    built_.worker_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  });
}

PromptUnitsBesidePrefill::Built PromptUnitsBesidePrefill::finish() {
  finished_ = true;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    worker_.join();
  } catch (...) {
    if (began_) working_.drop_staged();
    throw;
  }
  for (const PromptUnits& u : built_.units) {
    for (const at::Tensor& t : {u.order, u.sizes, u.offsets, u.index})
      worker_.hand_over(t);
  }
  built_.staged = stage_ && staged_ == static_cast<int64_t>(
                                           retrieval_layer_ids(policy_.settings(), layers_).size());
  built_.wait_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::move(built_);
}

}  // namespace engram
