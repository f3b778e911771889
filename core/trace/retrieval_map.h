// One reply's decode-time retrieval by token and layer (issue 17's panel): at which decode steps
// each layer retrieved (LouisKV's semantic boundaries, Quest's every step, a fixed stride), what
// each retrieval loaded (rows and units a KV head), and r_t, the similarity LouisKV's boundary rule
// compares with τ. The retrieval runner fills it for a traced request
// (core/kv/retrieval_kv_source.h) and hands it to the observer; `engram-cli --trace FILE` writes it
// as one JSON line beside the layer intervals and the layer timeline panel draws it as a token ×
// layer map.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace engram {

struct RetrievalMap {
  struct Retrieval {
    int64_t step = 0;
    int64_t layer = 0;
    int64_t rows = 0;   // rows loaded a KV head (the budget once the pool holds that many)
    int64_t units = 0;  // units the rows came from, summed over the KV heads
  };

  int64_t request = 0;
  std::string policy;  // the retrieval policy's spec, e.g. "louiskv:tau=70,..."
  int64_t layers = 0;
  int64_t full_layers = 0;  // layers 0..full_layers-1 attend over every token: never retrieve
  int64_t kv_heads = 0;
  int64_t budget = 0;  // B
  double tau = -1;     // the boundary threshold on r_t; < 0 when retrieval does not follow r_t
  int64_t steps = 0;   // decode steps served
  std::vector<Retrieval> retrievals;  // in (step, layer) order
  // [steps × layers], row-major by step: r_t where the policy computed one, NaN elsewhere.
  std::vector<float> similarity;
  // [steps × layers] like `similarity`: the τ each layer compared r_t with, when the layers have
  // τs of their own (LouisKV's `rate=`); empty when one `tau` serves every layer.
  std::vector<float> threshold;

  float similarity_at(int64_t step, int64_t layer) const {
    const size_t i = static_cast<size_t>(step * layers + layer);
    return i < similarity.size() ? similarity[i] : std::numeric_limits<float>::quiet_NaN();
  }
  // The τ r_t was compared with at (step, layer): the layer's own, else `tau` (NaN when < 0).
  float threshold_at(int64_t step, int64_t layer) const {
    if (threshold.empty())
      return tau >= 0 ? static_cast<float>(tau) : std::numeric_limits<float>::quiet_NaN();
    const size_t i = static_cast<size_t>(step * layers + layer);
    return i < threshold.size() ? threshold[i] : std::numeric_limits<float>::quiet_NaN();
  }
  // Starts step `steps` (every layer's r_t NaN until set_similarity); returns its index.
  int64_t begin_step() {
    similarity.resize(similarity.size() + static_cast<size_t>(layers),
                      std::numeric_limits<float>::quiet_NaN());
    return steps++;
  }
  void set_similarity(int64_t step, int64_t layer, float value) {
    similarity.at(static_cast<size_t>(step * layers + layer)) = value;
  }
  // A layer's own τ at `step`; the first call turns the map to per-layer thresholds.
  void set_threshold(int64_t step, int64_t layer, float value) {
    threshold.resize(similarity.size(), std::numeric_limits<float>::quiet_NaN());
    threshold.at(static_cast<size_t>(step * layers + layer)) = value;
  }
};

// {"retrieval_map": {...}}: one line; NaN similarities are written as null.
std::string to_json_line(const RetrievalMap& map);
// Whether a trace line holds a retrieval map rather than a layer interval.
bool is_retrieval_map_line(const std::string& line);
// Throws std::invalid_argument for a line that is not a well-formed retrieval map (sizes that do
// not match, a retrieval outside the map).
RetrievalMap parse_retrieval_map(const std::string& line);

}  // namespace engram
