#include "ui/timeline_model.h"

#include <QFile>
#include <QFileInfo>
#include <algorithm>
#include <stdexcept>

namespace engram::ui {

int RequestTimeline::row_of(const LayerInterval& interval) const {
  return interval.layer >= 0 ? static_cast<int>(interval.layer) : static_cast<int>(layers);
}

std::vector<std::pair<double, double>> lane_union(const std::vector<LayerInterval>& intervals,
                                                  TraceLane lane) {
  std::vector<std::pair<double, double>> spans;
  for (const auto& i : intervals) {
    if (i.lane == lane && i.end_us > i.start_us) spans.emplace_back(i.start_us, i.end_us);
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& s : spans) {
    if (!merged.empty() && s.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, s.second);
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

RequestTimeline& TimelineModel::slot(int64_t key, int64_t request, const QString& source) {
  RequestTimeline& r = requests_[key];
  if (r.intervals.empty()) {
    r.key = key;
    r.request = request;
    r.source = source;
  }
  dirty_[key] = true;
  return r;
}

void TimelineModel::add(const LayerInterval& interval) {
  const bool is_new = requests_.find(interval.request) == requests_.end();
  slot(interval.request, interval.request, {}).intervals.push_back(interval);
  if (is_new) drop_old_live_requests();
}

void TimelineModel::add(const std::vector<LayerInterval>& intervals) {
  for (const auto& i : intervals)
    add(i);
}

void TimelineModel::add_retrieval_map(const RetrievalMap& map) {
  const bool is_new = requests_.find(map.request) == requests_.end();
  slot(map.request, map.request, {}).retrieval = std::make_shared<const RetrievalMap>(map);
  if (is_new) drop_old_live_requests();
}

void TimelineModel::drop_old_live_requests() {
  int live = 0;
  for (const auto& [key, r] : requests_)
    live += key > 0 ? 1 : 0;
  for (auto it = requests_.lower_bound(1); live > max_live_ && it != requests_.end(); --live) {
    dirty_.erase(it->first);
    it = requests_.erase(it);
  }
}

std::vector<int64_t> TimelineModel::load_trace_file(const QString& path) {
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly | QIODevice::Text)) {
    throw std::runtime_error(path.toStdString() +
                             ": cannot open: " + file.errorString().toStdString());
  }
  // Parse everything first: a bad line adds nothing.
  std::vector<LayerInterval> intervals;
  std::vector<RetrievalMap> maps;
  int line_number = 0;
  while (!file.atEnd()) {
    const std::string line = file.readLine().trimmed().toStdString();
    ++line_number;
    if (line.empty()) continue;
    try {
      if (is_retrieval_map_line(line)) {
        maps.push_back(parse_retrieval_map(line));
      } else {
        intervals.push_back(parse_json_line(line));
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(path.toStdString() + ":" + std::to_string(line_number) + ": " +
                               e.what());
    }
  }
  if (intervals.empty()) throw std::runtime_error(path.toStdString() + ": no intervals");
  const QString source = QFileInfo(path).fileName();
  std::map<int64_t, int64_t> key_of;  // the file's request id -> our key
  for (const auto& i : intervals)
    key_of.emplace(i.request, 0);
  for (const auto& m : maps)
    key_of.emplace(m.request, 0);
  // The file's requests in their order, with keys below every key given so far.
  next_file_key_ -= static_cast<int64_t>(key_of.size());
  int64_t key = next_file_key_ + 1;
  for (auto& [request, k] : key_of)
    k = key++;
  for (const auto& i : intervals)
    slot(key_of[i.request], i.request, source).intervals.push_back(i);
  for (auto& m : maps) {
    const int64_t request = m.request;
    slot(key_of[request], request, source).retrieval =
        std::make_shared<const RetrievalMap>(std::move(m));
  }
  std::vector<int64_t> keys;
  // OxyGen's frames: each frame is a request of layer -1 events whose step is the frame index.
  for (const char* phase : {"frame", "isolated_frame"}) {
    std::vector<LayerInterval> frames;
    for (const auto& i : intervals) {
      if (i.phase != phase) continue;
      frames.push_back(i);
      frames.back().layer = i.step;  // the frame is the row
    }
    if (frames.empty()) continue;
    const int64_t k = --next_file_key_;
    RequestTimeline& r = slot(k, frames.front().request, source);
    r.intervals = std::move(frames);
    r.frame_rows = true;
    r.frame_phase = phase;
    keys.push_back(k);
  }
  for (const auto& [request, k] : key_of)
    keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

void TimelineModel::clear() {
  requests_.clear();
  dirty_.clear();
  next_file_key_ = -1;
}

QString TimelineModel::label(int64_t key) const {
  auto it = requests_.find(key);
  if (it == requests_.end()) return {};
  const RequestTimeline& r = it->second;
  if (r.frame_rows) {
    return r.source + (r.frame_phase == "frame" ? QStringLiteral(" frames (unified)")
                                                : QStringLiteral(" frames (isolated)"));
  }
  const QString id = QStringLiteral("#%1").arg(r.request);
  return r.source.isEmpty() ? id : r.source + QLatin1Char(' ') + id;
}

std::vector<int64_t> TimelineModel::requests() const {
  std::vector<int64_t> ids;
  for (const auto& [id, r] : requests_)
    ids.push_back(id);
  return ids;
}

const RequestTimeline* TimelineModel::request(int64_t id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return nullptr;
  RequestTimeline& r = it->second;
  if (!dirty_[id]) return &r;
  dirty_[id] = false;
  r.layers = r.retrieval ? r.retrieval->layers : 0;
  r.has_other = false;
  r.gaps.clear();
  if (r.intervals.empty()) {  // a retrieval map whose intervals have not come (yet)
    r.start_us = r.end_us = 0;
    r.busy_us[0] = r.busy_us[1] = 0;
    return &r;
  }
  r.start_us = r.intervals.front().start_us;
  r.end_us = r.intervals.front().end_us;
  for (const auto& i : r.intervals) {
    r.start_us = std::min(r.start_us, i.start_us);
    r.end_us = std::max(r.end_us, i.end_us);
    if (i.layer >= 0) {
      r.layers = std::max(r.layers, i.layer + 1);
    } else {
      r.has_other = true;
    }
  }
  for (TraceLane lane : {TraceLane::kCompute, TraceLane::kCopy}) {
    const auto merged = lane_union(r.intervals, lane);
    double busy = 0;
    for (const auto& m : merged)
      busy += m.second - m.first;
    r.busy_us[static_cast<int>(lane)] = busy;
    if (r.frame_rows) {  // frames run one after another, each on its own clock: sum, no gaps
      busy = 0;
      for (const auto& i : r.intervals)
        busy += i.lane == lane ? i.duration_us() : 0;
      r.busy_us[static_cast<int>(lane)] = busy;
      continue;
    }
    // A lane with no intervals at all (CPU: no copies) has no gaps to mark: it is not idle, it
    // is absent.
    if (merged.empty()) continue;
    double cursor = r.start_us;
    for (const auto& m : merged) {
      if (m.first > cursor && m.first - cursor >= min_gap_us_)
        r.gaps.push_back({lane, cursor, m.first});
      cursor = std::max(cursor, m.second);
    }
    if (r.end_us > cursor && r.end_us - cursor >= min_gap_us_)
      r.gaps.push_back({lane, cursor, r.end_us});
  }
  std::sort(r.gaps.begin(), r.gaps.end(),
            [](const TimelineGap& a, const TimelineGap& b) { return a.start_us < b.start_us; });
  return &r;
}

}  // namespace engram::ui
