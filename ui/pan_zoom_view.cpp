#include "ui/pan_zoom_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "ui/tooltip_event.h"

namespace engram::ui {

PanZoomView::PanZoomView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumHeight(120);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

double PanZoomView::x_of(double value, double width) const {
  return plot_left() +
         (value - view_start_) / (view_end_ - view_start_) * (width - plot_left() - plot_right());
}

double PanZoomView::value_of(double x, double width) const {
  return view_start_ + (x - plot_left()) / std::max(1.0, width - plot_left() - plot_right()) *
                           (view_end_ - view_start_);
}

void PanZoomView::zoom(double factor, double anchor_x) {
  const double anchor = value_of(anchor_x, width());
  const double span = std::max(min_span(), (view_end_ - view_start_) / factor);
  const double left = (anchor - view_start_) / (view_end_ - view_start_);
  view_start_ = anchor - left * span;
  view_end_ = view_start_ + span;
  update();
}

void PanZoomView::pan(double dx_pixels) {
  const double plot = std::max(1, width() - plot_left() - plot_right());
  const double by = dx_pixels / plot * (view_end_ - view_start_);
  view_start_ -= by;
  view_end_ -= by;
  update();
}

void PanZoomView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render_to(p, size());
}

void PanZoomView::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (event->modifiers() & Qt::ShiftModifier) {
    pan(steps * 60);
  } else {
    zoom(std::pow(1.25, steps), event->position().x());
  }
  event->accept();
}

void PanZoomView::mousePressEvent(QMouseEvent* event) {
  drag_from_ = event->pos();
}

void PanZoomView::mouseMoveEvent(QMouseEvent* event) {
  if (event->buttons() & Qt::LeftButton) {
    pan(event->pos().x() - drag_from_.x());
    drag_from_ = event->pos();
  }
}

bool PanZoomView::event(QEvent* event) {
  return answer_tooltip(this, event, [this](const QPoint& pos) { return describe_at(pos); }) ||
         QWidget::event(event);
}

}  // namespace engram::ui
