#include "ui/retrieval_map_view.h"

#include <QPainter>
#include <algorithm>
#include <cmath>
#include <limits>

#include "ui/axis_ticks.h"

namespace engram::ui {
namespace {

constexpr int kLabelWidth = 64;
constexpr int kRateWidth = 84;  // right: each layer's retrievals a token
constexpr int kAxisHeight = 22;
constexpr int kRowHeight = 12;
constexpr int kCountGap = 6;
constexpr int kCountHeight = 34;  // below: layers that retrieved at each token

const QColor kRetrieval(0xc4, 0x3c, 0x9a);  // as the timeline's "retrieve" intervals
const QColor kSimilarity(0x3b, 0x6e, 0xb5);

// A span of the plot's x axis and the steps it shows: one step when a step is at least a pixel
// wide, else the steps of one pixel column.
struct Column {
  double x0, x1;
  int64_t first, end;  // steps [first, end)
};

}  // namespace

QString describe_retrieval_map(const RetrievalMap& m) {
  const int64_t retrieval_layers = m.layers - m.full_layers;
  int64_t rows = 0, units = 0, compared = 0, below = 0;
  for (const auto& r : m.retrievals) {
    rows += r.rows;
    units += r.units;
  }
  const auto layers = static_cast<size_t>(std::max<int64_t>(1, m.layers));
  for (size_t i = 0; i < m.similarity.size(); ++i) {
    const float s = m.similarity[i];
    if (std::isnan(s)) continue;
    ++compared;
    below += s < m.threshold_at(int64_t(i / layers), int64_t(i % layers)) ? 1 : 0;
  }
  const auto n = static_cast<int64_t>(m.retrievals.size());
  const double pairs = double(std::max<int64_t>(1, m.steps * retrieval_layers));
  QString s = QObject::tr(
                  "Retrieval map (%1): %2 decode steps × %3 retrieval layers, %4 "
                  "retrievals (%5 a layer and token)")
                  .arg(QString::fromStdString(m.policy))
                  .arg(m.steps)
                  .arg(retrieval_layers)
                  .arg(n)
                  .arg(n / pairs, 0, 'f', 2);
  if (n > 0) {
    s += QObject::tr("; %1 rows a KV head per retrieval from %2 units a head")
             .arg(double(rows) / double(n), 0, 'f', 0)
             .arg(double(units) / double(n) / double(std::max<int64_t>(1, m.kv_heads)), 0, 'f', 1);
  }
  if (m.full_layers > 0) {
    s += m.full_layers == 1 ? QObject::tr("; layer 0 attends in full")
                            : QObject::tr("; layers 0-%1 attend in full").arg(m.full_layers - 1);
  }
  if (m.tau >= 0 && compared > 0) {
    s += QObject::tr("; r_t < τ = %1 at %2 of %3 compared steps")
             .arg(m.tau, 0, 'f', 2)
             .arg(below)
             .arg(compared);
  } else if (!m.threshold.empty() && compared > 0) {
    s += QObject::tr("; each layer its own τ: r_t below it at %1 of %2 compared steps")
             .arg(below)
             .arg(compared);
  }
  return s + QLatin1Char('.');
}

RetrievalMapView::RetrievalMapView(QWidget* parent) : PanZoomView(parent) {}

int RetrievalMapView::plot_left() const {
  return kLabelWidth;
}

int RetrievalMapView::plot_right() const {
  return kRateWidth;
}

QSize RetrievalMapView::sizeHint() const {
  const int rows = map_ ? static_cast<int>(map_->layers) : 4;
  return {640, kAxisHeight + rows * kRowHeight + kCountGap + kCountHeight + 6};
}

void RetrievalMapView::set_map(std::shared_ptr<const RetrievalMap> map) {
  map_ = std::move(map);
  index_.clear();
  per_layer_.clear();
  if (map_) {
    index_.assign(static_cast<size_t>(map_->steps * map_->layers), -1);
    per_layer_.assign(static_cast<size_t>(map_->layers), 0);
    for (size_t i = 0; i < map_->retrievals.size(); ++i) {
      const auto& r = map_->retrievals[i];
      index_[static_cast<size_t>(r.step * map_->layers + r.layer)] = static_cast<int32_t>(i);
      ++per_layer_[static_cast<size_t>(r.layer)];
    }
  }
  fit();
  updateGeometry();
}

const RetrievalMap::Retrieval* RetrievalMapView::retrieval_at(int64_t step, int64_t layer) const {
  if (!map_ || step < 0 || step >= map_->steps || layer < 0 || layer >= map_->layers)
    return nullptr;
  const int32_t i = index_[static_cast<size_t>(step * map_->layers + layer)];
  return i >= 0 ? &map_->retrievals[static_cast<size_t>(i)] : nullptr;
}

void RetrievalMapView::fit() {
  view_start_ = 0;
  view_end_ = map_ ? std::max<double>(1, static_cast<double>(map_->steps)) : 1;
  update();
}

void RetrievalMapView::render_to(QPainter& p, const QSize& size) const {
  const QPalette& pal = palette();
  p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
  p.setPen(pal.color(QPalette::Text));
  if (!map_ || map_->steps == 0) {
    p.drawText(QRect(QPoint(0, 0), size), Qt::AlignCenter,
               tr("No retrieval map: decode a reply with louiskv or pageretrieval."));
    return;
  }
  const RetrievalMap& m = *map_;
  const double w = size.width();
  const double plot_end = w - kRateWidth;
  const int count_top = kAxisHeight + static_cast<int>(m.layers) * kRowHeight + kCountGap;

  // Axis: decode steps.
  const double tick = std::max(1.0, tick_step(view_end_ - view_start_, std::max(2, int(w / 90))));
  QColor grid = pal.color(QPalette::Mid);
  grid.setAlpha(90);
  for (double s = std::ceil(view_start_ / tick) * tick; s <= view_end_; s += tick) {
    const double x = x_of(s, w);
    if (x < kLabelWidth || x > plot_end) continue;
    p.setPen(grid);
    p.drawLine(QPointF(x, kAxisHeight - 4), QPointF(x, count_top + kCountHeight));
    const QString label = QString::number(static_cast<int64_t>(s));
    if (x + 2 + p.fontMetrics().horizontalAdvance(label) > plot_end) continue;
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRectF(x + 2, 2, 100, kAxisHeight - 4), Qt::AlignLeft | Qt::AlignVCenter, label);
  }

  // The columns in view.
  std::vector<Column> columns;
  const double first = std::max(0.0, std::floor(view_start_));
  const double last = std::min(static_cast<double>(m.steps), std::ceil(view_end_));
  if (x_of(1, w) - x_of(0, w) >= 1.0) {
    for (double s = first; s < last; ++s)
      columns.push_back({x_of(s, w), x_of(s + 1, w), int64_t(s), int64_t(s) + 1});
  } else {
    for (double x = std::max<double>(kLabelWidth, x_of(first, w)); x < plot_end; ++x) {
      const auto a = static_cast<int64_t>(std::max(0.0, std::floor(value_of(x, w))));
      const auto b = std::min(m.steps, static_cast<int64_t>(std::floor(value_of(x + 1, w))));
      if (a >= m.steps) break;
      columns.push_back({x, x + 1, a, std::max(a + 1, b)});
    }
  }

  p.setClipRect(QRectF(kLabelWidth, 0, plot_end - kLabelWidth, size.height()));
  const QColor empty = pal.color(QPalette::AlternateBase);
  std::vector<int> layers_retrieving(columns.size(), 0);
  for (int64_t layer = 0; layer < m.layers; ++layer) {
    const double y = kAxisHeight + static_cast<double>(layer) * kRowHeight;
    if (layer < m.full_layers) {
      const QRectF r(
          std::max<double>(kLabelWidth, x_of(0, w)), y,
          std::min(plot_end, x_of(double(m.steps), w)) - std::max<double>(kLabelWidth, x_of(0, w)),
          kRowHeight - 1);
      p.fillRect(r, QColor(0x9a, 0x9a, 0x9a, 50));
      p.fillRect(r, QBrush(QColor(0x9a, 0x9a, 0x9a, 140), Qt::BDiagPattern));
      continue;
    }
    // Runs of one colour become one rectangle (an SVG export stays small).
    QColor run_colour;
    double run_x0 = 0, run_x1 = 0;
    const auto flush = [&] {
      if (run_x1 > run_x0)
        p.fillRect(QRectF(run_x0, y, run_x1 - run_x0, kRowHeight - 1), run_colour);
    };
    for (size_t c = 0; c < columns.size(); ++c) {
      const Column& col = columns[c];
      int64_t retrieved = 0;
      float lowest = std::numeric_limits<float>::quiet_NaN();
      for (int64_t s = col.first; s < col.end; ++s) {
        retrieved += index_[static_cast<size_t>(s * m.layers + layer)] >= 0 ? 1 : 0;
        const float r = m.similarity_at(s, layer);
        if (!std::isnan(r) && (std::isnan(lowest) || r < lowest)) lowest = r;
      }
      layers_retrieving[c] += retrieved > 0 ? 1 : 0;
      QColor colour = empty;
      if (retrieved > 0) {
        colour = kRetrieval;
        colour.setAlpha(90 +
                        static_cast<int>(165.0 * double(retrieved) / double(col.end - col.first)));
      } else if (!std::isnan(lowest)) {
        colour = kSimilarity;
        colour.setAlpha(20 + static_cast<int>(180.0 * std::clamp(1.0 - double(lowest), 0.0, 1.0)));
      }
      if (colour == run_colour && std::abs(col.x0 - run_x1) < 0.5) {
        run_x1 = col.x1;
        continue;
      }
      flush();
      run_colour = colour;
      run_x0 = col.x0;
      run_x1 = std::max(col.x0 + 1.0, col.x1);
    }
    flush();
  }
  // Below: how many retrieval layers retrieved at each token (most of a column's steps).
  const int64_t retrieval_layers = std::max<int64_t>(1, m.layers - m.full_layers);
  p.fillRect(QRectF(kLabelWidth, count_top, plot_end - kLabelWidth, kCountHeight),
             pal.color(QPalette::AlternateBase));
  for (size_t c = 0; c < columns.size(); ++c) {
    if (layers_retrieving[c] == 0) continue;
    const double h = kCountHeight * double(layers_retrieving[c]) / double(retrieval_layers);
    p.fillRect(QRectF(columns[c].x0, count_top + kCountHeight - h,
                      std::max(1.0, columns[c].x1 - columns[c].x0), h),
               kRetrieval);
  }
  p.setClipping(false);

  // Labels, and each layer's retrievals a token on the right.
  QFont small = p.font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.85));
  p.setFont(small);
  for (int64_t layer = 0; layer < m.layers; ++layer) {
    const double y = kAxisHeight + static_cast<double>(layer) * kRowHeight;
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRectF(2, y, kLabelWidth - 6, kRowHeight), Qt::AlignRight | Qt::AlignVCenter,
               tr("layer %1").arg(layer));
    if (layer < m.full_layers) {
      p.setPen(pal.color(QPalette::PlaceholderText));
      p.drawText(QRectF(plot_end + 4, y, kRateWidth - 6, kRowHeight),
                 Qt::AlignLeft | Qt::AlignVCenter, tr("full"));
      continue;
    }
    const double rate = double(per_layer_[static_cast<size_t>(layer)]) / double(m.steps);
    p.fillRect(QRectF(plot_end + 4, y + 2, 36 * rate, kRowHeight - 5), kRetrieval);
    p.drawText(QRectF(plot_end + 44, y, kRateWidth - 46, kRowHeight),
               Qt::AlignLeft | Qt::AlignVCenter, QString::number(rate, 'f', 2));
  }
  p.setPen(pal.color(QPalette::Text));
  p.drawText(QRectF(2, count_top, kLabelWidth - 6, kCountHeight), Qt::AlignRight | Qt::AlignVCenter,
             tr("layers"));
  p.drawText(QRectF(plot_end + 4, 2, kRateWidth - 6, kAxisHeight - 4),
             Qt::AlignLeft | Qt::AlignVCenter, tr("a token"));
}

QString RetrievalMapView::describe_at(const QPoint& pos) const {
  if (!map_ || pos.y() < kAxisHeight) return {};
  const RetrievalMap& m = *map_;
  const int count_top = kAxisHeight + static_cast<int>(m.layers) * kRowHeight + kCountGap;
  const double plot_end = width() - kRateWidth;
  const int64_t retrieval_layers = m.layers - m.full_layers;
  const auto row = static_cast<int64_t>((pos.y() - kAxisHeight) / kRowHeight);
  if (pos.x() >= plot_end) {  // the rate column
    if (row >= m.layers || row < m.full_layers) return {};
    const int64_t n = per_layer_[static_cast<size_t>(row)];
    return tr("layer %1: %2 retrievals in %3 decode steps (%4 a token)")
        .arg(row)
        .arg(n)
        .arg(m.steps)
        .arg(double(n) / double(std::max<int64_t>(1, m.steps)), 0, 'f', 2);
  }
  if (pos.x() < kLabelWidth) return {};
  const auto step = static_cast<int64_t>(std::floor(value_of(pos.x(), width())));
  if (step < 0 || step >= m.steps) return {};
  if (pos.y() >= count_top && pos.y() < count_top + kCountHeight) {
    int64_t n = 0;
    for (int64_t layer = m.full_layers; layer < m.layers; ++layer)
      n += retrieval_at(step, layer) ? 1 : 0;
    return tr("step %1: %2 of %3 retrieval layers retrieved")
        .arg(step)
        .arg(n)
        .arg(retrieval_layers);
  }
  if (row >= m.layers) return {};
  QString s = tr("step %1 · layer %2").arg(step).arg(row);
  if (row < m.full_layers) return s + tr("\nfull layer: attends over every token");
  const float r = m.similarity_at(step, row);
  const float threshold = m.threshold_at(step, row);
  const QString tau = std::isnan(threshold)
                          ? QString()
                          : (m.threshold.empty() ? tr(" (τ = %1)") : tr(" (the layer's τ = %1)"))
                                .arg(double(threshold), 0, 'f', 3);
  if (const RetrievalMap::Retrieval* hit = retrieval_at(step, row)) {
    s += tr("\nretrieved %1 rows a KV head from %2 units (%3 a head)")
             .arg(hit->rows)
             .arg(hit->units)
             .arg(double(hit->units) / double(std::max<int64_t>(1, m.kv_heads)), 0, 'f', 1);
    if (!std::isnan(r)) {
      s += tr("\nr_t = %1%2: a semantic boundary").arg(double(r), 0, 'f', 3).arg(tau);
    } else if (step == 0) {
      s += tr("\nthe first decode step always retrieves");
    }
    return s;
  }
  s += tr("\nno retrieval");
  if (!std::isnan(r)) s += tr(": r_t = %1%2").arg(double(r), 0, 'f', 3).arg(tau);
  return s;
}

}  // namespace engram::ui
