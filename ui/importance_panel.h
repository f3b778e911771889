// The importance-propagation panel (issue 16, "Panel"): reads a recompute trace
// (core/policies/recompute_trace.h, `engram-cli eval keep --trace FILE`) and shows one planning
// step at one layer: the assembled units as nodes on a circle in prompt order around the query
// (static groups square, dynamic segments round, ungrouped segments round in another colour), the
// layer's recompute set filled and the units already dropped greyed, the strongest unit
// attention as edges (width and opacity by mass), and, played hop by hop, the rounds of
// importance propagation that chose the next layer's set with each candidate's score. A strip
// below gives each unit's static/dynamic state over the steps. It only reads files: no engine.
#pragma once

#include <QPointF>
#include <QString>
#include <QWidget>
#include <map>
#include <string>
#include <vector>

#include "core/policies/recompute_trace.h"

class QComboBox;
class QLabel;
class QPainter;
class QPushButton;
class QSlider;
class QTimer;

namespace engram::ui {

class ImportanceGraphView;
class UnitStateStrip;

// An edge the graph draws: `from` attends to `to` with `mass` (from -1: the query).
struct ImportanceEdge {
  int64_t from = -1;
  int64_t to = 0;
  double mass = 0;
};

class ImportancePanel : public QWidget {
  Q_OBJECT

 public:
  explicit ImportancePanel(QWidget* parent = nullptr);

  // Shows the trace's first step at layer 0; false (and `error`) when the file is unreadable.
  bool open_trace_file(const QString& path, QString* error = nullptr);
  void set_trace(RecomputeTrace trace);
  const RecomputeTrace& trace() const { return trace_; }
  const TraceStep* step() const;    // the step shown; nullptr without a trace
  const TraceLayer* layer() const;  // the layer shown
  int step_index() const { return step_; }
  int layer_index() const { return layer_; }
  int step_count() const { return static_cast<int>(trace_.steps.size()); }
  int layer_count() const;
  void set_step(int index);  // stops the animation; keeps the layer when the step has it
  void set_layer(int layer);

  // What the graph shows for the current step and layer.
  std::vector<int64_t> filled_units() const;   // the layer's recompute set (unit indices)
  std::vector<int64_t> dropped_units() const;  // units of the step not recomputed here
  bool query_filled() const;
  std::vector<ImportanceEdge> edges() const;       // strongest first, at most kMaxEdges
  int hop_count() const;                           // propagation rounds at this layer
  int hop() const { return hop_; }                 // the round shown, -1 before the first
  std::vector<int64_t> highlighted_units() const;  // the relevant set of the round shown
  std::map<int64_t, double> scores() const;        // candidate unit -> score of the round shown
  bool playing() const;

  // The strip: each unit key ever assembled, by first appearance, and its group at a step
  // ("static", "dynamic", "segment", or empty when the step did not assemble it).
  const std::vector<std::string>& strip_keys() const { return keys_; }
  std::string unit_state(int step, const std::string& key) const;

  ImportanceGraphView* graph() const { return graph_; }
  QComboBox* step_list() const { return steps_; }
  QSlider* layer_slider() const { return layers_; }
  QPushButton* play_button() const { return play_; }
  QString summary_text() const;
  bool export_png(const QString& path) const;

  static constexpr int kMaxEdges = 60;
  static constexpr double kEdgeFloor = 0.1;  // of the strongest edge's mass

 public Q_SLOTS:
  void loadTraceFile();  // a file dialog
  void play();           // from the first round (again when the last is shown)
  void pause();
  void nextHop();  // one round on; the timer's tick; stops at the last
  void setHopInterval(int ms);

 Q_SIGNALS:
  void shown();  // step, layer or round changed

 private:
  void refresh();

  RecomputeTrace trace_;
  std::vector<std::string> keys_;
  std::vector<std::map<std::string, std::string>> states_;  // [step] key -> group
  int step_ = 0;
  int layer_ = 0;
  int hop_ = -1;
  QComboBox* steps_;
  QSlider* layers_;
  QLabel* layer_label_;
  QPushButton* play_;
  QPushButton* next_hop_;
  QLabel* hop_label_;
  QLabel* summary_;
  ImportanceGraphView* graph_;
  UnitStateStrip* strip_;
  QTimer* timer_;
};

// The node-and-edge picture of the panel's current step, layer and round.
class ImportanceGraphView : public QWidget {
 public:
  explicit ImportanceGraphView(const ImportancePanel* panel, QWidget* parent = nullptr);
  void render_to(QPainter& painter, const QSize& size) const;
  // Centre of unit `unit` (the query: -1) when the view is `size`: deterministic, prompt order
  // clockwise from the top, the query in the middle.
  QPointF node_center(int64_t unit, const QSize& size) const;
  QString describe_at(const QPoint& pos) const;
  QSize sizeHint() const override { return {560, 460}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  double node_radius(const QSize& size) const;
  const ImportancePanel* panel_;
};

}  // namespace engram::ui
