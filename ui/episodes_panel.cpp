#include "ui/episodes_panel.h"

#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QPushButton>
#include <QSlider>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <stdexcept>

#include "ui/tooltip_event.h"

namespace engram::ui {
namespace {

constexpr double kCaption = 18;  // the caption line above each picture
constexpr double kLegend = 20;   // the legend line below the scatter
constexpr double kAxisLabels = 40;

// A star of five points around `c`, `r` to its tips.
QPainterPath star(const QPointF& c, double r) {
  QPainterPath path;
  for (int i = 0; i < 10; ++i) {
    const double a = -std::numbers::pi / 2 + i * std::numbers::pi / 5;
    const double d = i % 2 == 0 ? r : r * 0.45;
    const QPointF p = c + QPointF(d * std::cos(a), d * std::sin(a));
    i == 0 ? path.moveTo(p) : path.lineTo(p);
  }
  path.closeSubpath();
  return path;
}

QPainterPath diamond(const QPointF& c, double r) {
  QPainterPath path;
  path.moveTo(c + QPointF(0, -r));
  path.lineTo(c + QPointF(r, 0));
  path.lineTo(c + QPointF(0, r));
  path.lineTo(c + QPointF(-r, 0));
  path.closeSubpath();
  return path;
}

QFont small_font(const QFont& base) {
  QFont f = base;
  f.setPointSizeF(std::max(6.0, f.pointSizeF() * 0.85));
  return f;
}

QString tau_text(double tau) {
  return tau <= kNoNewEpisodes ? QObject::tr("never (offline routing)")
                               : QString::number(tau, 'f', 3);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The scatter.

EpisodeScatterView::EpisodeScatterView(const EpisodesPanel* panel, QWidget* parent)
    : QWidget(parent), panel_(panel) {
  setObjectName(QStringLiteral("episodesScatter"));
  setMinimumSize(300, 240);
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

QPointF EpisodeScatterView::to_view(const PlanePoint& p, const QSize& size) const {
  const EpisodeStepPlane& plane = panel_->plane();
  double x0 = p.x, x1 = p.x, y0 = p.y, y1 = p.y;
  auto grow = [&](const PlanePoint& q) {
    x0 = std::min(x0, q.x);
    x1 = std::max(x1, q.x);
    y0 = std::min(y0, q.y);
    y1 = std::max(y1, q.y);
  };
  for (const PlanePoint& q : plane.windows)
    grow(q);
  for (const PlanePoint& q : plane.centroids)
    grow(q);
  if (panel_->step()) grow(plane.query);
  const double m = kCentroidRadius + 6;
  const QRectF area(m, kCaption + m, size.width() - 2 * m,
                    size.height() - kCaption - kLegend - 2 * m);
  const double rx = x1 - x0, ry = y1 - y0;
  double scale = 1;
  if (rx > 1e-12 && ry > 1e-12) {
    scale = std::min(area.width() / rx, area.height() / ry);
  } else if (rx > 1e-12) {
    scale = area.width() / rx;
  } else if (ry > 1e-12) {
    scale = area.height() / ry;
  }
  // y grows upwards on the plane.
  return area.center() + QPointF((p.x - (x0 + x1) / 2) * scale, -(p.y - (y0 + y1) / 2) * scale);
}

QPointF EpisodeScatterView::window_position(int64_t window, const QSize& size) const {
  const auto& w = panel_->plane().windows;
  if (window < 0 || window >= static_cast<int64_t>(w.size())) return {};
  return to_view(w[static_cast<size_t>(window)], size);
}

QPointF EpisodeScatterView::centroid_position(int64_t episode, const QSize& size) const {
  const auto& c = panel_->plane().centroids;
  if (episode < 0 || episode >= static_cast<int64_t>(c.size())) return {};
  return to_view(c[static_cast<size_t>(episode)], size);
}

QPointF EpisodeScatterView::query_position(const QSize& size) const {
  return to_view(panel_->plane().query, size);
}

void EpisodeScatterView::render_to(QPainter& p, const QSize& size) const {
  const QPalette& pal = palette();
  p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
  p.setRenderHint(QPainter::Antialiasing);
  p.setPen(pal.color(QPalette::Text));
  const EpisodeTraceStep* s = panel_->step();
  if (!s || (s->windows.empty() && s->episodes.empty())) {
    p.drawText(QRect(QPoint(0, 0), size), Qt::AlignCenter | Qt::TextWordWrap,
               s ? QObject::tr("No windows yet: the conversation fits its budget (one cache).")
                 : QObject::tr("Open an episode trace (engram-cli eval conversation --policy "
                               "epicache --episodes-trace FILE)\nwith File → Open episode trace… "
                               "or the Open button."));
    return;
  }
  const QFont small = small_font(p.font());
  p.setFont(small);

  // Spokes: each member window to its centroid, faint, so an episode reads as one shape.
  for (const EpisodeTraceEpisode& e : s->episodes) {
    QColor c = EpisodesPanel::episode_color(e.index);
    c.setAlpha(70);
    p.setPen(QPen(c, 1));
    const QPointF centre = centroid_position(e.index, size);
    for (int64_t w : e.members)
      p.drawLine(window_position(w, size), centre);
  }
  // Windows, the medoids ringed.
  for (const EpisodeTraceWindow& w : s->windows) {
    const int64_t e = panel_->episode_of_window(w.index);
    const QColor c = e < 0 ? QColor(0xb0, 0xb0, 0xb0) : EpisodesPanel::episode_color(e);
    const QPointF at = window_position(w.index, size);
    p.setPen(QPen(c.darker(140), 1));
    p.setBrush(c);
    p.drawEllipse(at, kWindowRadius, kWindowRadius);
  }
  for (const EpisodeTraceEpisode& e : s->episodes) {
    if (e.medoid < 0) continue;
    p.setPen(QPen(EpisodesPanel::episode_color(e.index).darker(150), 2.5));
    p.setBrush(Qt::NoBrush);
    p.drawEllipse(window_position(e.medoid, size), kWindowRadius + 4, kWindowRadius + 4);
  }
  // The routed query's line to its episode's centroid, under the marks.
  const QPointF q = query_position(size);
  if (s->query.episode >= 0) {
    p.setPen(QPen(EpisodesPanel::query_color(), 2, Qt::DashLine));
    p.drawLine(q, centroid_position(s->query.episode, size));
  }
  // Centroids: large diamonds, the episode's number beside.
  for (const EpisodeTraceEpisode& e : s->episodes) {
    const QPointF at = centroid_position(e.index, size);
    const QColor c = EpisodesPanel::episode_color(e.index);
    p.setPen(QPen(pal.color(QPalette::Text), 1.5));
    p.setBrush(c);
    p.drawPath(diamond(at, kCentroidRadius));
    p.setPen(c.darker(130));
    p.drawText(QRectF(at.x() + kCentroidRadius, at.y() - kCentroidRadius - 12, 40, 14),
               Qt::AlignLeft | Qt::AlignVCenter, QObject::tr("E%1").arg(e.index));
  }
  // The query: a star, ringed when it opened an episode.
  p.setPen(QPen(Qt::white, 1.5));
  p.setBrush(EpisodesPanel::query_color());
  p.drawPath(star(q, kQueryRadius));
  if (s->query.created) {
    p.setPen(QPen(EpisodesPanel::query_color(), 1.5, Qt::DotLine));
    p.setBrush(Qt::NoBrush);
    p.drawEllipse(q, kQueryRadius + 5, kQueryRadius + 5);
  }

  // Caption and legend.
  p.setPen(pal.color(QPalette::Text));
  const QString caption =
      QObject::tr(
          "step %1 of %2 · turn %3 · %4 windows · %5 episodes · the windows' two "
          "principal axes")
          .arg(panel_->step_index() + 1)
          .arg(panel_->step_count())
          .arg(s->turn)
          .arg(s->windows.size())
          .arg(s->episodes.size());
  p.drawText(QRectF(6, 2, size.width() - 12, kCaption - 2), Qt::AlignLeft | Qt::AlignVCenter,
             caption);
  double x = 6;
  const double y = size.height() - kLegend + 2;
  auto item = [&](const std::function<void(const QPointF&)>& mark, const QString& what) {
    mark(QPointF(x + 6, y + 8));
    p.setPen(pal.color(QPalette::Text));
    const double w = p.fontMetrics().horizontalAdvance(what);
    p.drawText(QRectF(x + 15, y, w + 4, 16), Qt::AlignLeft | Qt::AlignVCenter, what);
    x += 15 + w + 12;
  };
  for (const EpisodeTraceEpisode& e : s->episodes)
    item(
        [&](const QPointF& at) {
          p.setPen(Qt::NoPen);
          p.setBrush(EpisodesPanel::episode_color(e.index));
          p.drawEllipse(at, 5, 5);
        },
        QObject::tr("E%1").arg(e.index));
  item(
      [&](const QPointF& at) {
        p.setPen(QPen(pal.color(QPalette::Text), 1));
        p.setBrush(Qt::NoBrush);
        p.drawPath(diamond(at, 6));
      },
      QObject::tr("centroid"));
  item(
      [&](const QPointF& at) {
        p.setPen(QPen(pal.color(QPalette::Text), 2));
        p.setBrush(Qt::NoBrush);
        p.drawEllipse(at, 5, 5);
      },
      QObject::tr("medoid"));
  item(
      [&](const QPointF& at) {
        p.setPen(Qt::NoPen);
        p.setBrush(EpisodesPanel::query_color());
        p.drawPath(star(at, 7));
      },
      QObject::tr("query → routed centroid"));
}

void EpisodeScatterView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render_to(p, size());
}

QString EpisodeScatterView::describe_at(const QPoint& pos) const {
  const EpisodeTraceStep* s = panel_->step();
  if (!s) return {};
  auto near = [&](const QPointF& at, double r) {
    return std::hypot(at.x() - pos.x(), at.y() - pos.y()) <= r + 2;
  };
  if (near(query_position(size()), kQueryRadius)) {
    QString text = QObject::tr("query (turn %1): %2\nrouted to episode %3%4")
                       .arg(s->turn)
                       .arg(QString::fromStdString(s->query.label))
                       .arg(s->query.episode)
                       .arg(s->query.created ? QObject::tr(", created by it") : QString());
    for (size_t e = 0; e < s->query.cosines.size(); ++e)
      text += QObject::tr("\ncos to E%1: %2").arg(e).arg(s->query.cosines[e], 0, 'f', 3);
    return text + QObject::tr("\nτ: %1").arg(tau_text(s->query.tau));
  }
  for (const EpisodeTraceEpisode& e : s->episodes) {
    if (!near(centroid_position(e.index, size()), kCentroidRadius)) continue;
    QString text =
        QObject::tr(
            "episode %1 centroid · %2 windows · medoid %3\n%4 cache tokens, %5 "
            "fed since built%6")
            .arg(e.index)
            .arg(e.members.size())
            .arg(e.medoid < 0 ? QObject::tr("none") : QObject::tr("window %1").arg(e.medoid))
            .arg(e.cache_tokens)
            .arg(e.fed_tokens)
            .arg(e.built ? QObject::tr(" (built at this step)") : QString());
    if (static_cast<size_t>(e.index) < s->query.cosines.size())
      text += QObject::tr("\ncos to the query: %1")
                  .arg(s->query.cosines[static_cast<size_t>(e.index)], 0, 'f', 3);
    return text;
  }
  for (const EpisodeTraceWindow& w : s->windows) {
    if (!near(window_position(w.index, size()), kWindowRadius)) continue;
    const int64_t e = panel_->episode_of_window(w.index);
    bool medoid = false;
    for (const EpisodeTraceEpisode& ep : s->episodes)
      medoid |= ep.medoid == w.index;
    return QObject::tr("window %1 · utterances %2–%3 · %4%5\n%6")
        .arg(w.index)
        .arg(w.begin)
        .arg(w.end - 1)
        .arg(e < 0 ? QObject::tr("no episode yet") : QObject::tr("episode %1").arg(e))
        .arg(medoid ? QObject::tr(" (its medoid)") : QString())
        .arg(QString::fromStdString(w.label));
  }
  return {};
}

bool EpisodeScatterView::event(QEvent* event) {
  return answer_tooltip(this, event, [this](const QPoint& pos) { return describe_at(pos); }) ||
         QWidget::event(event);
}

// ---------------------------------------------------------------------------------------------
// The budget bars.

LayerBudgetBars::LayerBudgetBars(const EpisodesPanel* panel, QWidget* parent)
    : QWidget(parent), panel_(panel) {
  setObjectName(QStringLiteral("episodesBudgets"));
  setMinimumSize(200, 120);
}

QRectF LayerBudgetBars::plot(const QSize& size) const {
  return QRectF(kAxisLabels, kCaption + 4, size.width() - kAxisLabels - 8,
                size.height() - kCaption - 4 - 16);
}

QRectF LayerBudgetBars::bar_rect(int layer, const QSize& size) const {
  const std::vector<int64_t> budgets = panel_->layer_budgets();
  if (layer < 0 || layer >= static_cast<int>(budgets.size())) return {};
  const int64_t top = *std::max_element(budgets.begin(), budgets.end());
  if (top <= 0) return {};
  const QRectF area = plot(size);
  const double slot = area.width() / double(budgets.size());
  const double h = area.height() * double(budgets[static_cast<size_t>(layer)]) / double(top);
  const double gap = slot > 6 ? slot * 0.2 : 0;
  return QRectF(area.left() + layer * slot + gap / 2, area.bottom() - h, slot - gap, h);
}

void LayerBudgetBars::render_to(QPainter& p, const QSize& size) const {
  const QPalette& pal = palette();
  p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
  p.setFont(small_font(p.font()));
  p.setPen(pal.color(QPalette::Text));
  const EpisodeTraceStep* s = panel_->step();
  const std::vector<int64_t> budgets = panel_->layer_budgets();
  const QRectF caption(6, 2, size.width() - 12, kCaption);
  if (!s || budgets.empty()) {
    p.drawText(caption, Qt::AlignLeft | Qt::AlignVCenter, QObject::tr("KV budget per layer"));
    return;
  }
  const int64_t top = *std::max_element(budgets.begin(), budgets.end());
  const int64_t e = s->query.episode;
  QString title =
      e >= 0 ? QObject::tr("E%1's KV budget per layer").arg(e) : QObject::tr("KV budget per layer");
  title += top <= 0                    ? QObject::tr(": unbounded (full KV)")
           : panel_->budgets_uniform() ? QObject::tr(" (uniform, %1 each)").arg(top)
                                       : QObject::tr(" (calibrated)");
  p.drawText(caption, Qt::AlignLeft | Qt::AlignVCenter, title);
  if (top <= 0) return;
  const QRectF area = plot(size);
  p.setPen(pal.color(QPalette::PlaceholderText));
  p.drawLine(area.bottomLeft(), area.bottomRight());
  p.drawText(QRectF(0, area.top() - 6, kAxisLabels - 4, 12), Qt::AlignRight | Qt::AlignVCenter,
             QString::number(top));
  p.drawText(QRectF(0, area.bottom() - 6, kAxisLabels - 4, 12), Qt::AlignRight | Qt::AlignVCenter,
             QStringLiteral("0"));
  const QColor c = e >= 0 ? EpisodesPanel::episode_color(e) : QColor(0x8a, 0x8a, 0x8a);
  const double slot = area.width() / double(budgets.size());
  for (int l = 0; l < static_cast<int>(budgets.size()); ++l) {
    p.fillRect(bar_rect(l, size), c);
    const int every = std::max(1, static_cast<int>(std::ceil(24.0 / slot)));
    if (l % every == 0) {
      p.setPen(pal.color(QPalette::PlaceholderText));
      p.drawText(QRectF(area.left() + l * slot, area.bottom() + 1, slot * every, 14),
                 Qt::AlignLeft | Qt::AlignVCenter, QString::number(l));
    }
  }
}

void LayerBudgetBars::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render_to(p, size());
}

// ---------------------------------------------------------------------------------------------
// The size chart: stacked columns, one a step, each episode a band of its cache tokens.

EpisodeSizeChart::EpisodeSizeChart(EpisodesPanel* panel, QWidget* parent)
    : QWidget(parent), panel_(panel) {
  setObjectName(QStringLiteral("episodesSizes"));
  setMinimumSize(220, 120);
}

QRectF EpisodeSizeChart::plot(const QSize& size) const {
  return QRectF(kAxisLabels + 8, kCaption + 4, size.width() - kAxisLabels - 16,
                size.height() - kCaption - 4 - 16);
}

int64_t EpisodeSizeChart::top_tokens() const {
  int64_t top = 0;
  for (int s = 0; s < panel_->step_count(); ++s) {
    int64_t sum = 0;
    for (int64_t e = 0; e < panel_->most_episodes(); ++e)
      sum += std::max<int64_t>(0, panel_->cache_tokens(s, e));
    top = std::max(top, sum);
  }
  return top;
}

QPointF EpisodeSizeChart::point_at(int step, int64_t episode, const QSize& size) const {
  const int64_t top = top_tokens();
  if (step < 0 || step >= panel_->step_count() || top <= 0) return {};
  const QRectF area = plot(size);
  int64_t below = 0;
  for (int64_t e = 0; e < episode; ++e)
    below += std::max<int64_t>(0, panel_->cache_tokens(step, e));
  const int64_t own = std::max<int64_t>(0, panel_->cache_tokens(step, episode));
  const double slot = area.width() / panel_->step_count();
  const double y = area.bottom() - area.height() * (double(below) + double(own) / 2) / double(top);
  return QPointF(area.left() + (step + 0.5) * slot, y);
}

int EpisodeSizeChart::step_at(const QPoint& pos) const {
  const QRectF area = plot(size());
  if (panel_->step_count() == 0 || pos.x() < area.left() || pos.x() > area.right()) return -1;
  return std::clamp(int((pos.x() - area.left()) / area.width() * panel_->step_count()), 0,
                    panel_->step_count() - 1);
}

void EpisodeSizeChart::render_to(QPainter& p, const QSize& size) const {
  const QPalette& pal = palette();
  p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
  p.setFont(small_font(p.font()));
  p.setPen(pal.color(QPalette::Text));
  const int steps = panel_->step_count();
  const int64_t top = top_tokens();
  const int64_t now = [&] {
    int64_t sum = 0;
    for (int64_t e = 0; e < panel_->most_episodes(); ++e)
      sum += std::max<int64_t>(0, panel_->cache_tokens(panel_->step_index(), e));
    return sum;
  }();
  p.drawText(QRectF(6, 2, size.width() - 12, kCaption), Qt::AlignLeft | Qt::AlignVCenter,
             steps == 0 ? QObject::tr("Cache tokens per episode over the steps")
                        : QObject::tr("Cache tokens per episode over the steps, stacked (%1 at "
                                      "this step)")
                              .arg(now));
  if (steps == 0 || top <= 0) return;
  const QRectF area = plot(size);
  const double slot = area.width() / steps;
  const double gap = slot > 6 ? 1 : 0;
  for (int s = 0; s < steps; ++s) {
    double y = area.bottom();
    const EpisodeTraceStep& step = panel_->trace().steps[static_cast<size_t>(s)];
    for (const EpisodeTraceEpisode& e : step.episodes) {
      const double h = area.height() * double(std::max<int64_t>(0, e.cache_tokens)) / double(top);
      const QRectF band(area.left() + s * slot + gap / 2, y - h, slot - gap, h);
      p.fillRect(band, EpisodesPanel::episode_color(e.index));
      if (e.built && band.width() >= 4 && band.height() >= 4) {
        // A (re)build at this step: a white tick at the band's top.
        p.fillRect(QRectF(band.left(), band.top(), band.width(), 2), Qt::white);
      }
      y -= h;
    }
  }
  p.setPen(pal.color(QPalette::PlaceholderText));
  p.drawLine(area.bottomLeft(), area.bottomRight());
  p.drawText(QRectF(0, area.top() - 6, kAxisLabels + 4, 12), Qt::AlignRight | Qt::AlignVCenter,
             QString::number(top));
  p.drawText(QRectF(0, area.bottom() - 6, kAxisLabels + 4, 12), Qt::AlignRight | Qt::AlignVCenter,
             QStringLiteral("0"));
  const int every = std::max(1, static_cast<int>(std::ceil(28.0 / slot)));
  for (int s = 0; s < steps; s += every)
    p.drawText(QRectF(area.left() + s * slot, area.bottom() + 1, slot * every, 14),
               Qt::AlignLeft | Qt::AlignVCenter,
               QString::number(panel_->trace().steps[static_cast<size_t>(s)].turn));
  // The step shown.
  p.setPen(QPen(pal.color(QPalette::Text), 1.5));
  p.setBrush(Qt::NoBrush);
  p.drawRect(QRectF(area.left() + panel_->step_index() * slot, area.top(), slot, area.height()));
}

void EpisodeSizeChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render_to(p, size());
}

void EpisodeSizeChart::mousePressEvent(QMouseEvent* event) {
  const int s = step_at(event->pos());
  if (s >= 0) panel_->set_step(s);
}

// ---------------------------------------------------------------------------------------------
// The panel.

EpisodesPanel::EpisodesPanel(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("episodesPanel"));
  slider_ = new QSlider(Qt::Horizontal, this);
  slider_->setObjectName(QStringLiteral("episodesStep"));
  slider_->setRange(0, 0);
  slider_->setPageStep(1);
  slider_->setTickPosition(QSlider::TicksBelow);
  step_label_ = new QLabel(this);
  step_label_->setMinimumWidth(70);
  auto* open = new QPushButton(tr("Open…"), this);
  scatter_ = new EpisodeScatterView(this, this);
  side_ = new QLabel(this);
  side_->setObjectName(QStringLiteral("episodesRouting"));
  side_->setWordWrap(true);
  side_->setTextFormat(Qt::RichText);
  side_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  side_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  side_->setMinimumWidth(190);
  side_->setMaximumWidth(260);
  bars_ = new LayerBudgetBars(this, this);
  sizes_ = new EpisodeSizeChart(this, this);

  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Step"), this));
  bar->addWidget(slider_, 1);
  bar->addWidget(step_label_);
  bar->addWidget(open);
  auto* middle = new QHBoxLayout;
  middle->addWidget(scatter_, 1);
  middle->addWidget(side_);
  auto* charts = new QHBoxLayout;
  charts->addWidget(bars_, 2);
  charts->addWidget(sizes_, 3);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(bar);
  layout->addLayout(middle, 1);
  layout->addLayout(charts);

  connect(slider_, &QSlider::valueChanged, this, [this](int s) { set_step(s); });
  connect(open, &QPushButton::clicked, this, &EpisodesPanel::loadTraceFile);
  refresh();
}

const EpisodeTraceStep* EpisodesPanel::step() const {
  if (step_ < 0 || step_ >= step_count()) return nullptr;
  return &trace_.steps[static_cast<size_t>(step_)];
}

void EpisodesPanel::load(const EpisodeTrace& trace) {
  trace_ = trace;
  step_ = 0;
  refresh();
}

bool EpisodesPanel::append_step(const EpisodeTraceStep& step, QString* error) {
  try {
    validate_episode_trace_step(step);
  } catch (const std::invalid_argument& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
  const bool follow = step_count() == 0 || step_ == step_count() - 1;
  trace_.steps.push_back(step);
  if (follow) step_ = step_count() - 1;
  refresh();
  return true;
}

bool EpisodesPanel::open_trace_file(const QString& path, QString* error) {
  try {
    load(read_episode_trace(path.toStdString()));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void EpisodesPanel::loadTraceFile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open episode trace"), QString(),
                                                    tr("Episode traces (*.json);;All files (*)"));
  if (path.isEmpty()) return;
  QString error;
  if (!open_trace_file(path, &error)) QMessageBox::warning(this, tr("Episode trace"), error);
}

void EpisodesPanel::set_step(int index) {
  step_ = std::clamp(index, 0, std::max(0, step_count() - 1));
  refresh();
}

int64_t EpisodesPanel::episode_of_window(int64_t window) const {
  const EpisodeTraceStep* s = step();
  if (!s) return -1;
  for (const EpisodeTraceEpisode& e : s->episodes)
    if (std::find(e.members.begin(), e.members.end(), window) != e.members.end()) return e.index;
  return -1;
}

std::vector<int64_t> EpisodesPanel::layer_budgets() const {
  const EpisodeTraceStep* s = step();
  if (!s) return {};
  const int64_t e = s->query.episode;
  if (e >= 0 && e < static_cast<int64_t>(s->episodes.size()) &&
      !s->episodes[static_cast<size_t>(e)].layer_budgets.empty())
    return s->episodes[static_cast<size_t>(e)].layer_budgets;
  return std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(0, s->layers)), s->budget);
}

bool EpisodesPanel::budgets_uniform() const {
  const std::vector<int64_t> b = layer_budgets();
  return std::adjacent_find(b.begin(), b.end(), std::not_equal_to<>()) == b.end();
}

int64_t EpisodesPanel::cache_tokens(int step, int64_t episode) const {
  if (step < 0 || step >= step_count()) return -1;
  const auto& episodes = trace_.steps[static_cast<size_t>(step)].episodes;
  if (episode < 0 || episode >= static_cast<int64_t>(episodes.size())) return -1;
  return episodes[static_cast<size_t>(episode)].cache_tokens;
}

int64_t EpisodesPanel::most_episodes() const {
  size_t most = 0;
  for (const EpisodeTraceStep& s : trace_.steps)
    most = std::max(most, s.episodes.size());
  return static_cast<int64_t>(most);
}

QColor EpisodesPanel::episode_color(int64_t episode) {
  // Tableau 10: distinct in hue and lightness; more episodes reuse them in order.
  static const QColor kColors[] = {{0x4e, 0x79, 0xa7}, {0xf2, 0x8e, 0x2b}, {0x59, 0xa1, 0x4f},
                                   {0xe1, 0x57, 0x59}, {0x76, 0xb7, 0xb2}, {0xed, 0xc9, 0x48},
                                   {0xb0, 0x7a, 0xa1}, {0xff, 0x9d, 0xa7}, {0x9c, 0x75, 0x5f},
                                   {0xba, 0xb0, 0xac}};
  constexpr int64_t n = sizeof kColors / sizeof kColors[0];
  return kColors[((episode % n) + n) % n];
}

QColor EpisodesPanel::query_color() {
  return QColor(0x7a, 0x5c, 0xc4);  // the importance panel's query colour
}

QString EpisodesPanel::routing_text() const {
  const EpisodeTraceStep* s = step();
  if (!s)
    return tr(
        "No episode trace: engram-cli eval conversation --policy epicache "
        "--episodes-trace FILE writes one.");
  const EpisodeTraceQuery& q = s->query;
  QString html = tr("<b>Query</b> (turn %1): %2<br>")
                     .arg(s->turn)
                     .arg(QString::fromStdString(q.label).toHtmlEscaped());
  html += q.episode < 0
              ? tr("not routed: no episodes yet")
              : tr("routed to <b>E%1</b>%2")
                    .arg(q.episode)
                    .arg(q.created ? tr(", a new episode (best cosine below τ)") : QString());
  html += tr("<br>τ: %1<br>%2 · budget %3<br><table cellspacing=0 cellpadding=3>")
              .arg(tau_text(q.tau))
              .arg(QString::fromStdString(s->spec).toHtmlEscaped())
              .arg(s->budget > 0 ? QString::number(s->budget) : tr("unbounded"));
  html += tr("<tr><td></td><td>cos</td><td>windows</td><td>tokens</td></tr>");
  for (const EpisodeTraceEpisode& e : s->episodes) {
    const bool routed = e.index == q.episode;
    const QString cos = static_cast<size_t>(e.index) < q.cosines.size()
                            ? QString::number(q.cosines[static_cast<size_t>(e.index)], 'f', 3)
                            : tr("–");
    // The routed episode's row in bold (Qt's rich text takes <b> inside a cell, not around it).
    const QString b = routed ? QStringLiteral("<b>") : QString();
    const QString eb = routed ? QStringLiteral("</b>") : QString();
    const QString row = QStringLiteral("<td><span style=\"color:%1\">■</span> %2E%3%4</td>")
                            .arg(episode_color(e.index).name(), b)
                            .arg(e.index)
                            .arg(eb) +
                        QStringLiteral("<td>%1%2%3</td><td>%1%4%3</td><td>%1%5%6%3</td>")
                            .arg(b, cos, eb)
                            .arg(e.members.size())
                            .arg(e.cache_tokens)
                            .arg(e.built ? tr(" built") : QString());
    html += QStringLiteral("<tr>") + row + QStringLiteral("</tr>");
  }
  return html + QStringLiteral("</table>");
}

bool EpisodesPanel::export_png(const QString& path) {
  return grab().save(path, "PNG");
}

void EpisodesPanel::refresh() {
  const EpisodeTraceStep* s = step();
  plane_ = s ? project_step(*s) : EpisodeStepPlane{};
  slider_->blockSignals(true);
  slider_->setRange(0, std::max(0, step_count() - 1));
  slider_->setValue(step_);
  slider_->setEnabled(step_count() > 1);
  slider_->blockSignals(false);
  step_label_->setText(s ? tr("%1 / %2").arg(step_ + 1).arg(step_count()) : QString());
  side_->setText(routing_text());
  scatter_->update();
  bars_->update();
  sizes_->update();
  Q_EMIT shown();
}

}  // namespace engram::ui
