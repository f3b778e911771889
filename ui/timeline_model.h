// What the layer timeline panel draws: the intervals of each request (from the engine's observer
// or a file `engram-cli --trace FILE` wrote; both are LayerInterval records), arranged one row
// per transformer layer with a compute and a copy lane, and the idle gaps of each lane: spans of
// the request where no interval of that lane runs on any layer (host work, sampling, waits).
#pragma once

#include <QString>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/trace/layer_interval.h"
#include "core/trace/retrieval_map.h"

namespace engram::ui {

struct TimelineGap {
  TraceLane lane = TraceLane::kCompute;
  double start_us = 0;
  double end_us = 0;
  double duration_us() const { return end_us - start_us; }
};

struct RequestTimeline {
  int64_t key = 0;      // the model's key: the engine's request id, or negative for a file's
  int64_t request = 0;  // the request id in its source
  QString source;       // empty: this process's engine; else the trace file's name
  std::vector<LayerInterval> intervals;  // in arrival order
  double start_us = 0;                   // earliest start
  double end_us = 0;                     // latest end
  int64_t layers = 0;                    // rows 0..layers-1 are transformer layers
  bool has_other = false;  // intervals with layer -1 (embedding, lm head): one more row
  // OxyGen frames (engram-cli bench oxygen --trace): one row per frame instead of per layer,
  // each frame's prefill / action / language steps at their times within the frame (each frame
  // has its own clock, so idle gaps across rows are not computed).
  bool frame_rows = false;
  std::string frame_phase;        // "frame" (unified) or "isolated_frame"
  std::vector<TimelineGap> gaps;  // per lane, sorted by start
  // Decode-time retrieval (LouisKV, Quest): the reply's token x layer map; null for other policies.
  std::shared_ptr<const RetrievalMap> retrieval;
  double busy_us[2] = {0, 0};  // union of each lane's intervals

  int rows() const { return static_cast<int>(layers) + (has_other ? 1 : 0); }
  // Row of an interval: its layer, or the last row for layer -1.
  int row_of(const LayerInterval& interval) const;
};

// Requests are keyed by the engine's request id when they come from this process's observer,
// and by negative keys when they come from a trace file: request ids restart in every process, so
// `engram-cli`'s request 1 must not merge into the app's own request 1.
class TimelineModel {
 public:
  // Gaps shorter than this are not marked (timer noise between back-to-back layers). Only the
  // latest `max_live_requests` of the engine are kept, so weeks of chatting do not grow memory.
  explicit TimelineModel(double min_gap_us = 1.0, int max_live_requests = 64)
      : min_gap_us_(min_gap_us), max_live_(max_live_requests) {}

  void add(const LayerInterval& interval);  // from the engine: keyed by its request id
  void add(const std::vector<LayerInterval>& intervals);
  void add_retrieval_map(const RetrievalMap& map);  // from the engine: keyed by its request id
  // Reads JSON lines (layer intervals and retrieval maps) into requests of their own; returns their
  // keys (ascending). Throws
  // std::runtime_error naming the file and line of a bad record, and then adds nothing. A file
  // with OxyGen frame events also gets one "frames" request per execution mode: every frame a
  // row (RequestTimeline::frame_rows), listed before the file's requests.
  std::vector<int64_t> load_trace_file(const QString& path);
  void clear();

  std::vector<int64_t> requests() const;  // ascending: file requests first, then the engine's
  bool empty() const { return requests_.empty(); }
  // The request's timeline with gaps computed; nullptr for an unknown key.
  const RequestTimeline* request(int64_t key) const;
  // "#12" for the engine's request 12, "trace.jsonl #1" for a file's.
  QString label(int64_t key) const;

 private:
  RequestTimeline& slot(int64_t key, int64_t request, const QString& source);
  void drop_old_live_requests();

  double min_gap_us_;
  int max_live_;
  int64_t next_file_key_ = -1;
  mutable std::map<int64_t, RequestTimeline> requests_;
  mutable std::map<int64_t, bool> dirty_;
};

// Sorted, merged [start, end) spans of a lane's intervals.
std::vector<std::pair<double, double>> lane_union(const std::vector<LayerInterval>& intervals,
                                                  TraceLane lane);

}  // namespace engram::ui
