// The layer timeline panel: pick a request, see one row per layer with a compute lane and a KV
// copy lane, idle gaps hatched; wheel zooms around the cursor, drag pans, tooltips give the
// duration, tokens and bytes; export to PNG and SVG draws the same picture. A request that decoded
// through retrieval (LouisKV, Quest) also has its retrieval map (ui/retrieval_map_view.h): the
// "Retrievals" button shows it in place of the timeline, and the zoom and export buttons act on it.
#pragma once

#include <QWidget>
#include <vector>

#include "ui/pan_zoom_view.h"
#include "ui/timeline_model.h"

class QComboBox;
class QLabel;
class QPushButton;
class QStackedWidget;

namespace engram::ui {

class RetrievalMapView;

class TimelineView : public PanZoomView {
  Q_OBJECT

 public:
  explicit TimelineView(QWidget* parent = nullptr);
  void set_timeline(const RequestTimeline* timeline);  // keeps the pointer; nullptr clears
  void fit() override;
  double view_start_us() const { return view_start_; }
  double view_end_us() const { return view_end_; }
  void render_to(QPainter& painter, const QSize& size) const override;
  QSize sizeHint() const override;
  QString describe_at(const QPoint& pos) const override;

 protected:
  int plot_left() const override;
  double min_span() const override { return 0.5; }  // µs

 private:
  const RequestTimeline* timeline_ = nullptr;
};

class TimelinePanel : public QWidget {
  Q_OBJECT

 public:
  explicit TimelinePanel(QWidget* parent = nullptr);
  TimelineModel& model() { return model_; }
  TimelineView* view() const { return view_; }
  RetrievalMapView* map_view() const { return map_view_; }
  QPushButton* retrievals_button() const { return retrievals_; }
  // The shown request's retrieval map in place of its timeline (only when it has one).
  void show_retrievals(bool on);
  bool showing_retrievals() const;

  // Shows request `key` (the engine's latest when 0).
  void show_request(int64_t key = 0);
  int64_t shown_request() const { return shown_; }
  QComboBox* request_list() const { return requests_; }
  // Adds the requests of a trace file and shows its first; false (and `error`) when unreadable.
  bool open_trace_file(const QString& path, QString* error = nullptr);
  bool export_png(const QString& path) const;
  bool export_svg(const QString& path) const;

 public Q_SLOTS:
  void addIntervals(const QVector<engram::LayerInterval>& intervals);
  void addRetrievalMap(const engram::RetrievalMap& map);
  void loadTraceFile();

 private:
  void refresh_requests(int64_t select);
  void show_summary(const RequestTimeline* t);
  // The view on show (timeline or retrieval map), for the exports.
  QSize export_size() const;
  void render_shown(QPainter& painter, const QSize& size) const;

  TimelineModel model_;
  QComboBox* requests_;
  TimelineView* view_;
  RetrievalMapView* map_view_;
  QStackedWidget* views_;
  QPushButton* retrievals_;
  QLabel* summary_;
  bool follow_latest_ = true;
  int64_t shown_ = 0;
};

}  // namespace engram::ui
