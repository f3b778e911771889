#include "ui/engine_events.h"

namespace engram::ui {
namespace {
constexpr int kBatch = 512;
}

void register_engine_metatypes() {
  qRegisterMetaType<engram::LayerInterval>();
  qRegisterMetaType<engram::RequestSummary>();
  qRegisterMetaType<engram::RetrievalMap>();
  qRegisterMetaType<QVector<engram::LayerInterval>>();
}

EngineEvents::EngineEvents(QObject* parent) : QObject(parent) {
  register_engine_metatypes();
}

void EngineEvents::on_layer_interval(const LayerInterval& interval) {
  bool full = false;
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(interval);
    full = pending_.size() >= kBatch;
  }
  if (full) flush_intervals();
}

void EngineEvents::on_request_finished(const RequestSummary& summary) {
  flush_intervals();
  Q_EMIT requestFinished(summary);
}

void EngineEvents::on_retrieval_map(const RetrievalMap& map) {
  flush_intervals();
  Q_EMIT retrievalMap(map);
}

void EngineEvents::flush_intervals() {
  QVector<LayerInterval> batch;
  {
    std::lock_guard lock(mutex_);
    batch.swap(pending_);
  }
  if (!batch.isEmpty()) Q_EMIT layerIntervals(batch);
}

}  // namespace engram::ui
