// What the layer timeline panel draws: the intervals of each request (from the engine's observer
// or a file `engram-cli --trace FILE` wrote; both are LayerInterval records), arranged one row
// per transformer layer with a compute and a copy lane, and the idle gaps of each lane: spans of
// the request where no interval of that lane runs on any layer (host work, sampling, waits).
#pragma once

#include <QString>
#include <cstdint>
#include <map>
#include <vector>

#include "core/trace/layer_interval.h"

namespace engram::ui {

struct TimelineGap {
  TraceLane lane = TraceLane::kCompute;
  double start_us = 0;
  double end_us = 0;
  double duration_us() const { return end_us - start_us; }
};

struct RequestTimeline {
  int64_t request = 0;
  std::vector<LayerInterval> intervals;  // in arrival order
  double start_us = 0;                   // earliest start
  double end_us = 0;                     // latest end
  int64_t layers = 0;                    // rows 0..layers-1 are transformer layers
  bool has_other = false;         // intervals with layer -1 (embedding, lm head): one more row
  std::vector<TimelineGap> gaps;  // per lane, sorted by start
  double busy_us[2] = {0, 0};     // union of each lane's intervals

  int rows() const { return static_cast<int>(layers) + (has_other ? 1 : 0); }
  // Row of an interval: its layer, or the last row for layer -1.
  int row_of(const LayerInterval& interval) const;
};

class TimelineModel {
 public:
  // Gaps shorter than this are not marked (timer noise between back-to-back layers).
  explicit TimelineModel(double min_gap_us = 1.0) : min_gap_us_(min_gap_us) {}

  void add(const LayerInterval& interval);
  void add(const std::vector<LayerInterval>& intervals);
  // Reads JSON lines; throws std::runtime_error naming the file and line of a bad record.
  void load_trace_file(const QString& path);
  void clear();

  std::vector<int64_t> requests() const;  // ascending
  bool empty() const { return requests_.empty(); }
  // The request's timeline with gaps computed; nullptr for an unknown request.
  const RequestTimeline* request(int64_t id) const;

 private:
  double min_gap_us_;
  mutable std::map<int64_t, RequestTimeline> requests_;
  mutable std::map<int64_t, bool> dirty_;
};

// Sorted, merged [start, end) spans of a lane's intervals.
std::vector<std::pair<double, double>> lane_union(const std::vector<LayerInterval>& intervals,
                                                  TraceLane lane);

}  // namespace engram::ui
