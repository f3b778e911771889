// Records the compute and copy intervals of one request on the device's own clock (CUDA events
// on GPU, wall clock on CPU) and hands them to an observer once the request's marks resolve.
// Recording costs two marks per interval and no synchronisation until flush().
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "core/trace/engine_observer.h"
#include "gpu/device_timeline.h"

namespace engram {

class TraceRecorder {
 public:
  // The timeline is shared with the KV sources of the same request (their copy marks).
  TraceRecorder(gpu::DeviceTimeline& timeline, EngineObserver* observer, int64_t request);

  struct Open {
    int64_t index = -1;
  };
  // Starts an interval; `phase` and `step` come from set_phase().
  Open begin(int64_t layer, TraceLane lane, const char* what);
  void end(Open open, int64_t tokens, int64_t bytes = 0);
  // Records an interval whose start and end marks were taken already (a copy issued earlier).
  void add(int64_t layer, TraceLane lane, const char* what, int64_t start_mark, int64_t end_mark,
           int64_t tokens, int64_t bytes);
  void set_phase(std::string phase, int64_t step);

  // Waits for the device, resolves times and sends every interval to the observer.
  std::vector<LayerInterval> flush();

 private:
  struct Pending {
    LayerInterval interval;
    int64_t start_mark;
    int64_t end_mark;
  };
  gpu::DeviceTimeline& timeline_;
  EngineObserver* observer_;
  int64_t request_;
  std::string phase_ = "prefill";
  int64_t step_ = 0;
  std::string device_name_;
  std::vector<Pending> pending_;
};

}  // namespace engram
