#include "core/trace/trace_recorder.h"

namespace engram {

TraceRecorder::TraceRecorder(gpu::DeviceTimeline& timeline, EngineObserver* observer,
                             int64_t request)
    : timeline_(timeline),
      observer_(observer),
      request_(request),
      device_name_(timeline.device().str()) {}

void TraceRecorder::set_phase(std::string phase, int64_t step) {
  phase_ = std::move(phase);
  step_ = step;
}

TraceRecorder::Open TraceRecorder::begin(int64_t layer, TraceLane lane, const char* what) {
  Pending p;
  p.interval.layer = layer;
  p.interval.lane = lane;
  p.interval.what = what;
  p.start_mark = timeline_.mark(lane == TraceLane::kCopy ? gpu::Lane::kCopy : gpu::Lane::kCompute);
  p.end_mark = -1;
  pending_.push_back(std::move(p));
  return Open{static_cast<int64_t>(pending_.size()) - 1};
}

void TraceRecorder::end(Open open, int64_t tokens, int64_t bytes) {
  Pending& p = pending_.at(open.index);
  p.end_mark =
      timeline_.mark(p.interval.lane == TraceLane::kCopy ? gpu::Lane::kCopy : gpu::Lane::kCompute);
  p.interval.tokens = tokens;
  p.interval.bytes = bytes;
  p.interval.phase = phase_;
  p.interval.step = step_;
}

void TraceRecorder::add(int64_t layer, TraceLane lane, const char* what, int64_t start_mark,
                        int64_t end_mark, int64_t tokens, int64_t bytes) {
  Pending p;
  p.interval.layer = layer;
  p.interval.lane = lane;
  p.interval.what = what;
  p.interval.tokens = tokens;
  p.interval.bytes = bytes;
  p.interval.phase = phase_;
  p.interval.step = step_;
  p.start_mark = start_mark;
  p.end_mark = end_mark;
  pending_.push_back(std::move(p));
}

std::vector<LayerInterval> TraceRecorder::flush() {
  const std::vector<double> times = timeline_.resolve_us();
  std::vector<LayerInterval> out;
  out.reserve(pending_.size());
  for (Pending& p : pending_) {
    if (p.end_mark < 0) continue;  // never closed: an exception interrupted the layer
    LayerInterval i = std::move(p.interval);
    i.request = request_;
    i.start_us = times.at(p.start_mark);
    i.end_us = times.at(p.end_mark);
    i.device = device_name_;
    i.clock = timeline_.is_cuda() ? "cuda_event" : "wall";
    if (observer_) observer_->on_layer_interval(i);
    out.push_back(std::move(i));
  }
  pending_.clear();
  return out;
}

}  // namespace engram
