#include "ui/timeline_panel.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QImage>
#include <QLabel>
#include <QMessageBox>
#include <QPainter>
#include <QPushButton>
#include <QStackedWidget>
#include <QSvgGenerator>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "ui/axis_ticks.h"
#include "ui/retrieval_map_view.h"

namespace engram::ui {
namespace {

constexpr int kLabelWidth = 64;
constexpr int kAxisHeight = 22;
constexpr int kLaneHeight = 11;
constexpr int kRowGap = 5;
constexpr int kRowHeight = 2 * kLaneHeight + kRowGap;

QString format_us(double us) {
  if (std::abs(us) < 0.05) return QStringLiteral("0");
  if (std::abs(us) >= 1e6) return QStringLiteral("%1 s").arg(us / 1e6, 0, 'f', 2);
  if (std::abs(us) >= 1e3) return QStringLiteral("%1 ms").arg(us / 1e3, 0, 'f', 2);
  return QStringLiteral("%1 µs").arg(us, 0, 'f', 1);
}

QString format_bytes(int64_t b) {
  if (b >= (1LL << 20)) return QStringLiteral("%1 MiB").arg(b / double(1 << 20), 0, 'f', 2);
  if (b >= 1024) return QStringLiteral("%1 KiB").arg(b / 1024.0, 0, 'f', 1);
  return QStringLiteral("%1 B").arg(b);
}

QColor color_of(const LayerInterval& i) {
  if (i.what == "retrieve") return QColor(0xc4, 0x3c, 0x9a);  // LouisKV / Quest retrievals
  if (i.lane == TraceLane::kCopy) return QColor(0xe6, 0x8a, 0x00);
  if (i.phase == "frame" || i.phase == "isolated_frame") {  // OxyGen frame events, by task
    if (i.what == "prefill") return QColor(0x2f, 0x6f, 0xd6);
    if (i.what == "action") return QColor(0xd6, 0x3a, 0x2f);
    if (i.what.rfind("language", 0) == 0) return QColor(0x2e, 0x9d, 0x5b);
    return QColor(0x8a, 0x8a, 0x8a);  // spawning a request's own suffix
  }
  if (i.phase == "prefill") return QColor(0x2f, 0x6f, 0xd6);
  if (i.layer < 0) return QColor(0x7a, 0x5c, 0xc4);
  return QColor(0x2e, 0x9d, 0x5b);
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : PanZoomView(parent) {}

int TimelineView::plot_left() const {
  return kLabelWidth;
}

QSize TimelineView::sizeHint() const {
  const int rows = timeline_ ? timeline_->rows() : 4;
  return {640, kAxisHeight + rows * kRowHeight + 8};
}

void TimelineView::set_timeline(const RequestTimeline* timeline) {
  timeline_ = timeline;
  fit();
  updateGeometry();
}

void TimelineView::fit() {
  if (timeline_) {
    const double pad = std::max(1.0, (timeline_->end_us - timeline_->start_us) * 0.01);
    view_start_ = timeline_->start_us - pad;
    view_end_ = timeline_->end_us + pad;
  } else {
    view_start_ = 0;
    view_end_ = 1;
  }
  update();
}

void TimelineView::render_to(QPainter& p, const QSize& size) const {
  const QPalette& pal = palette();
  p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
  p.setPen(pal.color(QPalette::Text));
  if (!timeline_) {
    p.drawText(QRect(QPoint(0, 0), size), Qt::AlignCenter,
               tr("No request traced yet: send a message."));
    return;
  }
  const double w = size.width();
  const RequestTimeline& t = *timeline_;
  // Axis.
  const double step = tick_step(view_end_ - view_start_, std::max(2, int(w / 110)));
  QColor grid = pal.color(QPalette::Mid);
  grid.setAlpha(90);
  for (double us = std::ceil(view_start_ / step) * step; us <= view_end_; us += step) {
    const double x = x_of(us, w);
    if (x < kLabelWidth) continue;
    p.setPen(grid);
    p.drawLine(QPointF(x, kAxisHeight - 4), QPointF(x, size.height()));
    // A label that would run past the right edge is left out rather than cut.
    const QString label = format_us(us - t.start_us);
    if (x + 2 + p.fontMetrics().horizontalAdvance(label) > w) continue;
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRectF(x + 2, 2, 100, kAxisHeight - 4), Qt::AlignLeft | Qt::AlignVCenter, label);
  }
  p.setClipRect(QRectF(kLabelWidth, 0, w - kLabelWidth, size.height()));
  // Idle gaps: hatched bands over their lane in every row.
  for (const auto& g : t.gaps) {
    const double x0 = std::max<double>(kLabelWidth, x_of(g.start_us, w));
    const double x1 = std::min(w, x_of(g.end_us, w));
    if (x1 <= x0) continue;
    const int lane = static_cast<int>(g.lane);
    for (int row = 0; row < t.rows(); ++row) {
      const QRectF r(x0, kAxisHeight + row * kRowHeight + lane * kLaneHeight,
                     std::max(1.0, x1 - x0), kLaneHeight - 1);
      p.fillRect(r, QBrush(QColor(0xd0, 0x3b, 0x3b, 70)));
      p.fillRect(r, QBrush(QColor(0xd0, 0x3b, 0x3b, 120), Qt::BDiagPattern));
    }
  }
  for (const auto& i : t.intervals) {
    const double x0 = x_of(i.start_us, w);
    const double x1 = x_of(i.end_us, w);
    if (x1 < kLabelWidth || x0 > w) continue;
    const int row = t.row_of(i);
    const QRectF r(x0, kAxisHeight + row * kRowHeight + static_cast<int>(i.lane) * kLaneHeight,
                   std::max(1.0, x1 - x0), kLaneHeight - 1);
    p.fillRect(r, color_of(i));
  }
  p.setClipping(false);
  // Row labels.
  p.setPen(pal.color(QPalette::Text));
  QFont small = p.font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.85));
  p.setFont(small);
  for (int row = 0; row < t.rows(); ++row) {
    const QString name =
        row < t.layers ? (t.frame_rows ? tr("frame %1") : tr("layer %1")).arg(row) : tr("other");
    const double y = kAxisHeight + row * kRowHeight;
    p.drawText(QRectF(2, y, kLabelWidth - 6, kLaneHeight), Qt::AlignRight | Qt::AlignVCenter, name);
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(QRectF(2, y + kLaneHeight, kLabelWidth - 6, kLaneHeight),
               Qt::AlignRight | Qt::AlignVCenter, tr("copy"));
    p.setPen(pal.color(QPalette::Text));
  }
}

QString TimelineView::describe_at(const QPoint& pos) const {
  if (!timeline_ || pos.x() < kLabelWidth || pos.y() < kAxisHeight) return {};
  const int row = (pos.y() - kAxisHeight) / kRowHeight;
  const int lane = ((pos.y() - kAxisHeight) % kRowHeight) / kLaneHeight;
  if (row >= timeline_->rows() || lane > 1) return {};
  const double us = value_of(pos.x(), width());
  const double slop = 2.0 / std::max(1, width() - kLabelWidth) * (view_end_ - view_start_);
  for (const auto& i : timeline_->intervals) {
    if (timeline_->row_of(i) != row || static_cast<int>(i.lane) != lane) continue;
    if (us < i.start_us - slop || us > i.end_us + slop) continue;
    QString s = tr("%1 %2 · %3%4\n%5 %6 · %7 tokens\nstart %8 · duration %9")
                    .arg(QString::fromStdString(i.phase), QString::fromStdString(i.what))
                    .arg(i.phase == "decode" ? tr(" step %1").arg(i.step) : QString())
                    .arg(QString())
                    .arg(timeline_->frame_rows ? tr("frame") : tr("layer"))
                    .arg(i.layer)
                    .arg(i.tokens)
                    .arg(format_us(i.start_us - timeline_->start_us), format_us(i.duration_us()));
    if (i.bytes > 0) s += tr("\n%1 moved").arg(format_bytes(i.bytes));
    s +=
        tr("\n%1, %2 clock").arg(QString::fromStdString(i.device), QString::fromStdString(i.clock));
    return s;
  }
  for (const auto& g : timeline_->gaps) {
    if (static_cast<int>(g.lane) == lane && us >= g.start_us && us <= g.end_us) {
      return tr("idle %1 lane · %2")
          .arg(lane == 0 ? tr("compute") : tr("copy"), format_us(g.duration_us()));
    }
  }
  return {};
}

TimelinePanel::TimelinePanel(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("layerTimelinePanel"));
  requests_ = new QComboBox(this);
  requests_->setObjectName(QStringLiteral("timelineRequests"));
  requests_->setMinimumContentsLength(14);
  view_ = new TimelineView(this);
  map_view_ = new RetrievalMapView(this);
  views_ = new QStackedWidget(this);
  views_->addWidget(view_);
  views_->addWidget(map_view_);
  retrievals_ = new QPushButton(tr("Retrievals"), this);
  retrievals_->setObjectName(QStringLiteral("timelineRetrievals"));
  retrievals_->setCheckable(true);
  retrievals_->setEnabled(false);
  retrievals_->setToolTip(tr("Decode-time retrieval by token and layer (louiskv, pageretrieval)"));
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  auto* fit = new QPushButton(tr("Fit"), this);
  auto* zoom_in = new QPushButton(tr("+"), this);
  auto* zoom_out = new QPushButton(tr("−"), this);
  auto* open = new QPushButton(tr("Open trace…"), this);
  auto* png = new QPushButton(tr("PNG…"), this);
  auto* svg = new QPushButton(tr("SVG…"), this);
  for (auto* b : {zoom_in, zoom_out})
    b->setFixedWidth(28);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Request"), this));
  bar->addWidget(requests_, 1);
  bar->addWidget(retrievals_);
  bar->addWidget(zoom_in);
  bar->addWidget(zoom_out);
  bar->addWidget(fit);
  bar->addWidget(open);
  bar->addWidget(png);
  bar->addWidget(svg);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(bar);
  layout->addWidget(views_, 1);
  layout->addWidget(summary_);

  connect(requests_, &QComboBox::activated, this, [this](int index) {
    const int64_t key = requests_->itemData(index).toLongLong();
    follow_latest_ = index == requests_->count() - 1 && key > 0;
    show_request(key);
  });
  connect(retrievals_, &QPushButton::toggled, this, &TimelinePanel::show_retrievals);
  connect(fit, &QPushButton::clicked, this, [this] {
    if (showing_retrievals()) {
      map_view_->fit();
    } else {
      view_->fit();
    }
  });
  const auto zoom = [this](double factor) {
    if (showing_retrievals()) {
      map_view_->zoom(factor, map_view_->width() / 2.0);
    } else {
      view_->zoom(factor, view_->width() / 2.0);
    }
  };
  connect(zoom_in, &QPushButton::clicked, this, [zoom] { zoom(2.0); });
  connect(zoom_out, &QPushButton::clicked, this, [zoom] { zoom(0.5); });
  connect(open, &QPushButton::clicked, this, &TimelinePanel::loadTraceFile);
  connect(png, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export PNG"), QStringLiteral("timeline.png"), tr("PNG images (*.png)"));
    if (!path.isEmpty() && !export_png(path))
      QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
  });
  connect(svg, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export SVG"), QStringLiteral("timeline.svg"), tr("SVG images (*.svg)"));
    if (!path.isEmpty() && !export_svg(path))
      QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
  });
  show_summary(nullptr);
}

void TimelinePanel::addIntervals(const QVector<LayerInterval>& intervals) {
  if (intervals.isEmpty()) return;
  for (const auto& i : intervals)
    model_.add(i);
  const int64_t latest = model_.requests().back();
  refresh_requests(follow_latest_ ? latest : shown_);
}

void TimelinePanel::addRetrievalMap(const RetrievalMap& map) {
  model_.add_retrieval_map(map);
  const int64_t latest = model_.requests().back();
  refresh_requests(follow_latest_ ? latest : shown_);
}

bool TimelinePanel::showing_retrievals() const {
  return views_->currentWidget() == map_view_;
}

void TimelinePanel::show_retrievals(bool on) {
  const RequestTimeline* t = model_.request(shown_);
  on = on && t && t->retrieval;
  views_->setCurrentWidget(on ? static_cast<QWidget*>(map_view_) : view_);
  if (retrievals_->isChecked() != on) {
    const QSignalBlocker block(retrievals_);
    retrievals_->setChecked(on);
  }
  show_summary(t);
}

void TimelinePanel::refresh_requests(int64_t select) {
  const auto keys = model_.requests();
  requests_->blockSignals(true);
  requests_->clear();
  int index = -1;
  for (int64_t key : keys) {
    const RequestTimeline* t = model_.request(key);
    requests_->addItem(tr("%1 · %2").arg(model_.label(key), format_us(t->end_us - t->start_us)),
                       QVariant::fromValue<qlonglong>(key));
    if (key == select) index = requests_->count() - 1;
  }
  requests_->setCurrentIndex(index >= 0 ? index : requests_->count() - 1);
  requests_->blockSignals(false);
  show_request(requests_->currentData().toLongLong());
}

void TimelinePanel::show_request(int64_t key) {
  if (key == 0 && !model_.empty()) key = model_.requests().back();
  const RequestTimeline* t = model_.request(key);
  shown_ = t ? key : 0;
  view_->set_timeline(t);
  map_view_->set_map(t ? t->retrieval : nullptr);
  retrievals_->setEnabled(t && t->retrieval);
  // Stays on the map from request to request while each has one.
  show_retrievals(retrievals_->isChecked());
  const int index = requests_->findData(QVariant::fromValue<qlonglong>(key));
  if (index >= 0 && index != requests_->currentIndex()) requests_->setCurrentIndex(index);
}

void TimelinePanel::show_summary(const RequestTimeline* t) {
  if (!t) {
    summary_->setText(
        tr("Compute intervals are green (decode), blue (prefill), purple (embedding "
           "and LM head); KV copies orange; idle gaps hatched red."));
    return;
  }
  if (showing_retrievals() && t->retrieval) {
    summary_->setText(describe_retrieval_map(*t->retrieval) +
                      tr(" Magenta: a retrieval; blue: r_t (darker is lower); hatched: full "
                         "layers."));
    return;
  }
  const double span = t->end_us - t->start_us;
  double idle = 0;
  int compute_gaps = 0;
  for (const auto& g : t->gaps) {
    if (g.lane == TraceLane::kCompute) {
      idle += g.duration_us();
      ++compute_gaps;
    }
  }
  const QString device = t->intervals.empty()
                             ? QString()
                             : QString::fromStdString(t->intervals.front().device + ", " +
                                                      t->intervals.front().clock + " clock");
  // The CPU path copies no KV: say so rather than "copy busy 0".
  const QString copy =
      t->busy_us[1] > 0 ? tr("copy busy %1").arg(format_us(t->busy_us[1])) : tr("no KV copies");
  if (t->frame_rows) {
    int64_t actions = 0, steps = 0;
    for (const auto& i : t->intervals) {
      actions += i.what == "action" ? 1 : 0;
      steps += i.what.rfind("language", 0) == 0 ? 1 : 0;
    }
    summary_->setText(tr("%1: %2 frames, one row each (prefill blue, action red, batched language "
                         "steps green, request spawns grey), %3 actions and %4 language steps; "
                         "compute %5 in all.")
                          .arg(model_.label(t->key))
                          .arg(t->layers)
                          .arg(actions)
                          .arg(steps)
                          .arg(format_us(t->busy_us[0])));
    return;
  }
  summary_->setText(tr("Request %1: %2 intervals over %3 layers, %4 (%5). Compute busy %6, idle "
                       "%7 in %8 gaps; %9.")
                        .arg(model_.label(t->key))
                        .arg(t->intervals.size())
                        .arg(t->layers)
                        .arg(format_us(span), device, format_us(t->busy_us[0]), format_us(idle))
                        .arg(compute_gaps)
                        .arg(copy));
}

void TimelinePanel::loadTraceFile() {
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open trace"), {}, tr("Traces (*.jsonl *.json *.trace);;All files (*)"));
  if (path.isEmpty()) return;
  QString error;
  if (!open_trace_file(path, &error)) QMessageBox::warning(this, tr("Open trace"), error);
}

bool TimelinePanel::open_trace_file(const QString& path, QString* error) {
  try {
    const std::vector<int64_t> keys = model_.load_trace_file(path);
    // Stay on the file until the person picks the engine's latest request again.
    follow_latest_ = false;
    refresh_requests(keys.front());
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

QSize TimelinePanel::export_size() const {
  const QWidget* shown = views_->currentWidget();
  return {std::max(shown->width(), 1200), std::max(shown->height(), shown->sizeHint().height())};
}

void TimelinePanel::render_shown(QPainter& p, const QSize& size) const {
  if (showing_retrievals()) {
    map_view_->render_to(p, size);
  } else {
    view_->render_to(p, size);
  }
}

bool TimelinePanel::export_png(const QString& path) const {
  const QSize size = export_size();
  QImage image(size * 2, QImage::Format_ARGB32_Premultiplied);
  image.setDevicePixelRatio(2);
  QPainter p(&image);
  render_shown(p, size);
  p.end();
  return image.save(path, "PNG");
}

bool TimelinePanel::export_svg(const QString& path) const {
  const QSize size = export_size();
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(size);
  svg.setViewBox(QRect(QPoint(0, 0), size));
  svg.setTitle(showing_retrievals() ? QStringLiteral("Engram retrieval map")
                                    : QStringLiteral("Engram layer timeline"));
  QPainter p;
  if (!p.begin(&svg)) return false;
  render_shown(p, size);
  return p.end();
}

}  // namespace engram::ui
