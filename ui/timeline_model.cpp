#include "ui/timeline_model.h"

#include <QFile>
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

void TimelineModel::add(const LayerInterval& interval) {
  RequestTimeline& r = requests_[interval.request];
  if (r.intervals.empty()) {
    r.request = interval.request;
    r.start_us = interval.start_us;
    r.end_us = interval.end_us;
  }
  r.intervals.push_back(interval);
  dirty_[interval.request] = true;
}

void TimelineModel::add(const std::vector<LayerInterval>& intervals) {
  for (const auto& i : intervals)
    add(i);
}

void TimelineModel::load_trace_file(const QString& path) {
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly | QIODevice::Text)) {
    throw std::runtime_error(path.toStdString() +
                             ": cannot open: " + file.errorString().toStdString());
  }
  int line_number = 0;
  while (!file.atEnd()) {
    const QByteArray line = file.readLine().trimmed();
    ++line_number;
    if (line.isEmpty()) continue;
    try {
      add(parse_json_line(line.toStdString()));
    } catch (const std::exception& e) {
      throw std::runtime_error(path.toStdString() + ":" + std::to_string(line_number) + ": " +
                               e.what());
    }
  }
}

void TimelineModel::clear() {
  requests_.clear();
  dirty_.clear();
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
  r.layers = 0;
  r.has_other = false;
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
  r.gaps.clear();
  for (TraceLane lane : {TraceLane::kCompute, TraceLane::kCopy}) {
    const auto merged = lane_union(r.intervals, lane);
    double busy = 0;
    for (const auto& m : merged)
      busy += m.second - m.first;
    r.busy_us[static_cast<int>(lane)] = busy;
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
