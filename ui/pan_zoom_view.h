// A plot whose x axis pans and zooms: the layer timeline over microseconds, the retrieval map over
// decode steps. The wheel zooms around the cursor, Shift+wheel or a drag pans, tooltips come from
// describe_at(), and paintEvent draws render_to(), which the exports call too.
#pragma once

#include <QPoint>
#include <QSize>
#include <QString>
#include <QWidget>

class QPainter;

namespace engram::ui {

class PanZoomView : public QWidget {
  Q_OBJECT

 public:
  explicit PanZoomView(QWidget* parent = nullptr);
  virtual void fit() = 0;
  void zoom(double factor, double anchor_x);
  void pan(double dx_pixels);
  // The picture at `size` over the current view.
  virtual void render_to(QPainter& painter, const QSize& size) const = 0;
  // What lies under `pos`; empty when nothing.
  virtual QString describe_at(const QPoint& pos) const = 0;

 protected:
  // The plot spans [plot_left(), width - plot_right()) of a widget `width` wide.
  virtual int plot_left() const = 0;
  virtual int plot_right() const { return 0; }
  virtual double min_span() const = 0;  // the narrowest view, in the axis' units
  double x_of(double value, double width) const;
  double value_of(double x, double width) const;

  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

  double view_start_ = 0;
  double view_end_ = 1;

 private:
  QPoint drag_from_;
};

}  // namespace engram::ui
