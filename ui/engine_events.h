// The one adapter from the engine's observer (called on the worker thread) to Qt signals, which
// reach receivers on the UI thread queued. Intervals are sent in batches: a traced request emits
// thousands of them, and one queued event per interval would flood the UI's event loop.
#pragma once

#include <QObject>
#include <QVector>
#include <mutex>
#include <vector>

#include "core/trace/engine_observer.h"

Q_DECLARE_METATYPE(engram::LayerInterval)
Q_DECLARE_METATYPE(engram::RequestSummary)
Q_DECLARE_METATYPE(engram::RetrievalMap)

namespace engram::ui {

class EngineEvents : public QObject, public EngineObserver {
  Q_OBJECT

 public:
  explicit EngineEvents(QObject* parent = nullptr);

  void on_layer_interval(const LayerInterval& interval) override;
  void on_request_finished(const RequestSummary& summary) override;
  void on_retrieval_map(const RetrievalMap& map) override;

 Q_SIGNALS:
  void layerIntervals(const QVector<engram::LayerInterval>& intervals);
  void requestFinished(const engram::RequestSummary& summary);
  // After the request's intervals (they are sent first).
  void retrievalMap(const engram::RetrievalMap& map);

 private:
  void flush_intervals();

  std::mutex mutex_;
  QVector<LayerInterval> pending_;
};

void register_engine_metatypes();

}  // namespace engram::ui
