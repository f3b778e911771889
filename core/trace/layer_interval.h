// One interval of a request's layer timeline: a layer's compute, or a KV copy for a layer.
// `engram-cli --trace FILE` writes these as JSON lines and the layer timeline panel draws them;
// both use to_json_line / parse_json_line so the file and the panel cannot drift apart.
#pragma once

#include <cstdint>
#include <string>

namespace engram {

enum class TraceLane : uint8_t { kCompute, kCopy };

struct LayerInterval {
  int64_t request = 0;  // request id within the process
  std::string phase;    // "prefill", "decode", "load", ...
  int64_t step = 0;     // decode step (0 for prefill)
  int64_t layer = -1;   // -1: not a transformer layer (embedding, lm head)
  TraceLane lane = TraceLane::kCompute;
  std::string what;     // "layer", "kv_copy", "lm_head", ...
  double start_us = 0;  // since the request's first mark
  double end_us = 0;
  int64_t bytes = 0;   // bytes moved (copy lane)
  int64_t tokens = 0;  // tokens computed (compute lane) or moved (copy lane)
  std::string device;  // "cpu", "cuda:0"
  std::string clock;   // "wall" or "cuda_event"

  double duration_us() const { return end_us - start_us; }
};

std::string to_json_line(const LayerInterval& interval);
// Throws std::invalid_argument for a line that is not a layer interval.
LayerInterval parse_json_line(const std::string& line);
const char* lane_name(TraceLane lane);

}  // namespace engram
