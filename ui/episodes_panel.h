// The EpiCache episodes panel (issue 15, "Panel"): reads an episode trace
// (core/policies/episode_trace.h; `engram-cli eval conversation --policy epicache
// --episodes-trace FILE`, or steps the app feeds live through append_step()) and shows one step:
// the conversation's windows on the plane of their two principal axes (project_step()) coloured
// by episode, each episode's centroid (a large diamond) and medoid (a ringed window), the routed
// query (a star with a line to its episode's centroid; every cosine in the side list and the
// tooltip); the routed episode's per-layer budgets as bars (equal bars when uniform); and each
// episode's cache tokens over the steps. A slider picks the step. It only reads: no engine.
#pragma once

#include <QPointF>
#include <QString>
#include <QWidget>
#include <vector>

#include "core/policies/episode_trace.h"

class QLabel;
class QPainter;
class QSlider;

namespace engram::ui {

class EpisodeScatterView;
class LayerBudgetBars;
class EpisodeSizeChart;

class EpisodesPanel : public QWidget {
  Q_OBJECT

 public:
  explicit EpisodesPanel(QWidget* parent = nullptr);

  // Shows the trace's first step.
  void load(const EpisodeTrace& trace);
  // Adds a step (a live turn); the panel moves to it when it showed the last step (or none).
  // False (and `error`) when the step is inconsistent (validate_episode_trace_step()).
  bool append_step(const EpisodeTraceStep& step, QString* error = nullptr);
  // False (and `error`) when the file is unreadable; the trace shown stays.
  bool open_trace_file(const QString& path, QString* error = nullptr);
  const EpisodeTrace& trace() const { return trace_; }
  const EpisodeTraceStep* step() const;  // the step shown; nullptr without one
  int step_index() const { return step_; }
  int step_count() const { return static_cast<int>(trace_.steps.size()); }
  void set_step(int index);

  // The shown step on the plane of its windows (empty without a step).
  const EpisodeStepPlane& plane() const { return plane_; }
  // The episode window `window` belongs to at the shown step; -1: none.
  int64_t episode_of_window(int64_t window) const;
  // The routed episode's budget per layer at the shown step: its own vector, else the step's
  // uniform budget on every layer (empty when the step has neither layers nor episodes).
  std::vector<int64_t> layer_budgets() const;
  bool budgets_uniform() const;
  // Cache tokens of `episode` at step `step`; -1 when the step has no such episode.
  int64_t cache_tokens(int step, int64_t episode) const;
  int64_t most_episodes() const;  // over all steps: the size chart's lines
  // Episodes keep their numbers across steps, so an episode keeps its colour.
  static QColor episode_color(int64_t episode);
  static QColor query_color();
  QString routing_text() const;  // the side list, rich text

  EpisodeScatterView* scatter() const { return scatter_; }
  LayerBudgetBars* budget_bars() const { return bars_; }
  EpisodeSizeChart* size_chart() const { return sizes_; }
  QSlider* step_slider() const { return slider_; }
  bool export_png(const QString& path);

 public Q_SLOTS:
  void loadTraceFile();  // a file dialog

 Q_SIGNALS:
  void shown();  // the step shown (or the trace) changed

 private:
  void refresh();

  EpisodeTrace trace_;
  EpisodeStepPlane plane_;
  int step_ = 0;
  QSlider* slider_;
  QLabel* step_label_;
  QLabel* side_;
  EpisodeScatterView* scatter_;
  LayerBudgetBars* bars_;
  EpisodeSizeChart* sizes_;
};

// The windows, centroids and query of the shown step on the plane (equal scales on both axes, so
// distances on screen keep their proportions).
class EpisodeScatterView : public QWidget {
 public:
  explicit EpisodeScatterView(const EpisodesPanel* panel, QWidget* parent = nullptr);
  void render_to(QPainter& painter, const QSize& size) const;
  QPointF to_view(const PlanePoint& p, const QSize& size) const;
  QPointF window_position(int64_t window, const QSize& size) const;
  QPointF centroid_position(int64_t episode, const QSize& size) const;
  QPointF query_position(const QSize& size) const;
  QString describe_at(const QPoint& pos) const;
  QSize sizeHint() const override { return {520, 400}; }

  static constexpr double kWindowRadius = 6;
  static constexpr double kCentroidRadius = 12;  // half the diamond's diagonal
  static constexpr double kQueryRadius = 12;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  const EpisodesPanel* panel_;
};

// The routed episode's budget per layer, one bar a layer.
class LayerBudgetBars : public QWidget {
 public:
  explicit LayerBudgetBars(const EpisodesPanel* panel, QWidget* parent = nullptr);
  void render_to(QPainter& painter, const QSize& size) const;
  QRectF bar_rect(int layer, const QSize& size) const;
  QSize sizeHint() const override { return {260, 150}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  QRectF plot(const QSize& size) const;
  const EpisodesPanel* panel_;
};

// Each episode's cache tokens over the steps, one line an episode; a click picks the step.
class EpisodeSizeChart : public QWidget {
 public:
  explicit EpisodeSizeChart(EpisodesPanel* panel, QWidget* parent = nullptr);
  void render_to(QPainter& painter, const QSize& size) const;
  QPointF point_at(int step, int64_t episode, const QSize& size) const;
  int step_at(const QPoint& pos) const;
  QSize sizeHint() const override { return {320, 150}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;

 private:
  QRectF plot(const QSize& size) const;
  int64_t top_tokens() const;
  EpisodesPanel* panel_;
};

}  // namespace engram::ui
