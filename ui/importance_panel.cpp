#include "ui/importance_panel.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QImage>
#include <QLabel>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QPushButton>
#include <QSlider>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <stdexcept>

#include "ui/tooltip_event.h"

namespace engram::ui {
namespace {

constexpr int kDefaultHopMs = 900;
constexpr int kLabelChars = 18;  // of a unit's label beside its node
constexpr double kLabelMargin = 92;

QColor group_color(const std::string& group) {
  if (group == "static") return QColor(0x2f, 0x6f, 0xd6);
  if (group == "dynamic") return QColor(0xe6, 0x8a, 0x00);
  if (group == "segment") return QColor(0x2e, 0x9d, 0x5b);
  return QColor(0x8a, 0x8a, 0x8a);
}
const QColor kQueryColor(0x7a, 0x5c, 0xc4);
const QColor kRelevantColor(0xd6, 0x3a, 0x2f);
const QColor kDroppedFill(0xdc, 0xdc, 0xdc);
const QColor kDroppedLine(0xa0, 0xa0, 0xa0);

QString short_label(const std::string& label) {
  QString s = QString::fromStdString(label);
  return s.size() <= kLabelChars ? s : s.left(kLabelChars - 1) + QChar(0x2026);
}

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

QString list_text(const std::vector<int64_t>& v) {
  QStringList parts;
  for (int64_t x : v)
    parts << QString::number(x);
  return QStringLiteral("{") + parts.join(QStringLiteral(", ")) + QStringLiteral("}");
}

}  // namespace

// The static/dynamic state of each unit key (rows) over the steps (columns); a click picks
// the step.
class UnitStateStrip : public QWidget {
 public:
  UnitStateStrip(ImportancePanel* panel, QWidget* parent) : QWidget(parent), panel_(panel) {
    setMinimumHeight(70);
    setMouseTracking(true);
  }
  QSize sizeHint() const override { return {560, 110}; }

 protected:
  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    p.setPen(pal.color(QPalette::Text));
    QFont small = p.font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.85));
    p.setFont(small);
    // Caption with the colour key.
    double x = 4;
    auto say = [&](const QString& what, const QColor* swatch) {
      if (swatch) {
        p.fillRect(QRectF(x, kCaption / 2 - 4, 9, 9), *swatch);
        x += 12;
      }
      const double w = p.fontMetrics().horizontalAdvance(what);
      p.drawText(QRectF(x, 0, w + 2, kCaption), Qt::AlignLeft | Qt::AlignVCenter, what);
      x += w + 10;
    };
    say(tr("Each unit (row) over the steps (columns):"), nullptr);
    for (const char* group : {"static", "dynamic", "segment"}) {
      const QColor c = group_color(group);
      say(tr(group), &c);
    }
    say(tr("blank: not assembled · click: go to the step"), nullptr);
    const QRectF area = cells();
    const auto& keys = panel_->strip_keys();
    const int steps = panel_->step_count();
    if (keys.empty() || steps == 0) return;
    const double cw = area.width() / steps, ch = area.height() / double(keys.size());
    for (int s = 0; s < steps; ++s)
      for (size_t k = 0; k < keys.size(); ++k) {
        const std::string state = panel_->unit_state(s, keys[k]);
        if (state.empty()) continue;
        p.fillRect(QRectF(area.left() + s * cw, area.top() + double(k) * ch, std::max(1.0, cw - 1),
                          std::max(1.0, ch - (ch > 3 ? 1 : 0))),
                   group_color(state));
      }
    p.setPen(QPen(pal.color(QPalette::Text), 1.5));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(area.left() + panel_->step_index() * cw, area.top(), cw, area.height()));
  }
  void mousePressEvent(QMouseEvent* event) override {
    const int s = step_at(event->pos());
    if (s >= 0) panel_->set_step(s);
  }
  bool event(QEvent* event) override {
    if (event->type() != QEvent::ToolTip) return QWidget::event(event);
    auto* help = static_cast<QHelpEvent*>(event);
    const int s = step_at(help->pos());
    const QRectF area = cells();
    const auto& keys = panel_->strip_keys();
    if (s < 0 || keys.empty()) {
      QToolTip::hideText();
      return true;
    }
    const auto k = static_cast<size_t>(
        std::clamp<double>((help->pos().y() - area.top()) / area.height() * double(keys.size()), 0,
                           double(keys.size() - 1)));
    const std::string state = panel_->unit_state(s, keys[k]);
    QToolTip::showText(
        help->globalPos(),
        tr("%1 · step %2: %3")
            .arg(QString::fromStdString(keys[k]))
            .arg(panel_->trace().steps[static_cast<size_t>(s)].step)
            .arg(state.empty() ? tr("not assembled") : QString::fromStdString(state)),
        this);
    return true;
  }

 private:
  static constexpr double kCaption = 16;
  QRectF cells() const { return QRectF(4, kCaption + 2, width() - 8, height() - kCaption - 6); }
  int step_at(const QPoint& pos) const {
    const QRectF area = cells();
    if (panel_->step_count() == 0 || !area.contains(pos)) return -1;
    return std::clamp(int((pos.x() - area.left()) / area.width() * panel_->step_count()), 0,
                      panel_->step_count() - 1);
  }
  ImportancePanel* panel_;
};

ImportanceGraphView::ImportanceGraphView(const ImportancePanel* panel, QWidget* parent)
    : QWidget(parent), panel_(panel) {
  setObjectName(QStringLiteral("importanceGraph"));
  setMinimumSize(320, 260);
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

double ImportanceGraphView::node_radius(const QSize& size) const {
  const TraceStep* s = panel_->step();
  const double ring = std::max(40.0, std::min(size.width(), size.height()) / 2.0 - kLabelMargin);
  const double n = s ? std::max<double>(1, double(s->units.size())) : 1;
  return std::clamp(std::numbers::pi * ring / n * 0.6, 4.0, 15.0);
}

QPointF ImportanceGraphView::node_center(int64_t unit, const QSize& size) const {
  const QPointF mid(size.width() / 2.0, size.height() / 2.0 + 6);
  const TraceStep* s = panel_->step();
  if (!s || unit < 0) return mid;
  size_t at = 0;  // prompt order
  while (at < s->units.size() && s->units[at].index != unit)
    ++at;
  const double ring = std::max(40.0, std::min(size.width(), size.height()) / 2.0 - kLabelMargin);
  const double angle =
      -std::numbers::pi / 2 + 2 * std::numbers::pi * double(at) / double(s->units.size());
  return mid + QPointF(ring * std::cos(angle), ring * std::sin(angle));
}

void ImportanceGraphView::render_to(QPainter& p, const QSize& size) const {
  const QPalette& pal = palette();
  p.fillRect(QRect(QPoint(0, 0), size), pal.color(QPalette::Base));
  p.setRenderHint(QPainter::Antialiasing);
  p.setPen(pal.color(QPalette::Text));
  const TraceStep* s = panel_->step();
  const TraceLayer* l = panel_->layer();
  if (!s || !l) {
    p.drawText(QRect(QPoint(0, 0), size), Qt::AlignCenter | Qt::TextWordWrap,
               QObject::tr("Open a recompute trace (engram-cli eval keep --trace FILE)\nwith "
                           "File → Open recompute trace… or the Open button."));
    return;
  }
  const double r = node_radius(size);
  const std::vector<int64_t> filled = panel_->filled_units();
  const std::vector<int64_t> relevant = panel_->highlighted_units();
  const std::map<int64_t, double> scores = panel_->scores();

  // Edges under the nodes: width and opacity grow with the mass.
  const std::vector<ImportanceEdge> edges = panel_->edges();
  const double strongest = edges.empty() ? 1.0 : edges.front().mass;
  for (auto e = edges.rbegin(); e != edges.rend(); ++e) {
    const double t = e->mass / strongest;
    QColor c = e->from < 0 ? kQueryColor : QColor(0x33, 0x4a, 0x7a);
    c.setAlpha(int(40 + 190 * t));
    const QPointF a = node_center(e->from, size), b = node_center(e->to, size);
    const QPointF d = b - a;
    const double len = std::hypot(d.x(), d.y());
    if (len < 2 * r + 2) continue;
    const QPointF u = d / len;
    const QPointF from = a + u * (e->from < 0 ? 18.0 : r), to = b - u * (r + 2);
    const double width = 0.6 + 4.0 * t;
    p.setPen(QPen(c, width, Qt::SolidLine, Qt::RoundCap));
    p.drawLine(from, to);
    const QPointF n(-u.y(), u.x());
    const double head = 4 + 1.5 * width;
    QPainterPath arrow;
    arrow.moveTo(to);
    arrow.lineTo(to - u * head + n * head * 0.5);
    arrow.lineTo(to - u * head - n * head * 0.5);
    arrow.closeSubpath();
    p.fillPath(arrow, c);
  }

  QFont small = p.font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.8));
  QFont bold = small;
  bold.setBold(true);
  const QPointF mid = node_center(-1, size);
  for (const TraceUnit& u : s->units) {
    const QPointF c = node_center(u.index, size);
    const bool on = contains(filled, u.index);
    const QColor color = group_color(u.group);
    p.setPen(QPen(on ? color.darker(130) : kDroppedLine, 1.2));
    p.setBrush(on ? color : kDroppedFill);
    const QRectF box(c.x() - r, c.y() - r, 2 * r, 2 * r);
    if (u.group == "static") {
      p.drawRoundedRect(box, 2, 2);
    } else {
      p.drawEllipse(box);
    }
    if (contains(relevant, u.index)) {
      p.setPen(QPen(kRelevantColor, 3));
      p.setBrush(Qt::NoBrush);
      p.drawEllipse(box.adjusted(-4, -4, 4, 4));
    }
    p.setFont(small);
    if (r >= 7) {
      p.setPen(on ? QColor(Qt::white) : pal.color(QPalette::PlaceholderText));
      p.drawText(box, Qt::AlignCenter, QString::number(u.index));
    }
    // The label (and the round's score) beside the node, on the outer side: right of the
    // nodes on the right, left of those on the left, above or below those at the top or bottom.
    const QPointF out = c - mid;
    const double len = std::max(1.0, std::hypot(out.x(), out.y()));
    const bool left = out.x()<-len * 0.3, right = out.x()> len * 0.3;
    const double w = kLabelMargin + 20, gap = r + 6;
    QRectF text(0, c.y() - 13, w, 26);
    if (left) {
      text.moveRight(c.x() - gap);
    } else if (right) {
      text.moveLeft(c.x() + gap);
    } else {
      text.moveLeft(c.x() - w / 2);
      text.moveTop(out.y() < 0 ? c.y() - gap - 26 : c.y() + gap);
    }
    const Qt::Alignment align = (left    ? Qt::AlignRight
                                 : right ? Qt::AlignLeft
                                         : Qt::AlignHCenter) |
                                Qt::AlignVCenter;
    QString line = s->units.size() <= 48 ? short_label(u.label) : QString();
    const auto score = scores.find(u.index);
    p.setPen(on ? pal.color(QPalette::Text) : pal.color(QPalette::PlaceholderText));
    if (score == scores.end()) {
      p.drawText(text, align, line);
    } else {
      p.drawText(text.adjusted(0, 0, 0, -13), align | Qt::AlignBottom, line);
      p.setFont(bold);
      p.setPen(kRelevantColor);
      p.drawText(text.adjusted(0, 13, 0, 0), align | Qt::AlignTop,
                 QString::number(score->second, 'f', 3));
    }
  }
  // The query in the middle.
  const QRectF qbox(mid.x() - 22, mid.y() - 11, 44, 22);
  p.setPen(QPen(kQueryColor.darker(130), 1.2));
  p.setBrush(panel_->query_filled() ? kQueryColor : kDroppedFill);
  p.drawRoundedRect(qbox, 8, 8);
  p.setFont(small);
  p.setPen(QColor(Qt::white));
  p.drawText(qbox, Qt::AlignCenter, QObject::tr("query"));

  // Caption and legend.
  p.setPen(pal.color(QPalette::Text));
  p.setFont(small);
  const int hops = panel_->hop_count();
  QString caption = QObject::tr("layer %1/%2 · %3 of %4 units recomputed")
                        .arg(panel_->layer_index())
                        .arg(panel_->layer_count() - 1)
                        .arg(filled.size())
                        .arg(s->units.size());
  if (hops > 0)
    caption += panel_->hop() < 0
                   ? QObject::tr(" · %1 propagation rounds: press Play").arg(hops)
                   : QObject::tr(" · round %1 of %2").arg(panel_->hop() + 1).arg(hops);
  p.drawText(QRectF(6, 2, size.width() - 12, 16), Qt::AlignLeft | Qt::AlignVCenter, caption);
  const double y = size.height() - 16;
  double x = 6;
  auto swatch = [&](const QBrush& fill, const QColor& line, bool square, const QString& what) {
    p.setPen(QPen(line, 1));
    p.setBrush(fill);
    const QRectF b(x, y + 3, 10, 10);
    square ? p.drawRoundedRect(b, 2, 2) : p.drawEllipse(b);
    p.setPen(pal.color(QPalette::Text));
    const double w = p.fontMetrics().horizontalAdvance(what);
    p.drawText(QRectF(x + 13, y, w + 4, 16), Qt::AlignLeft | Qt::AlignVCenter, what);
    x += 13 + w + 12;
  };
  swatch(group_color("static"), group_color("static"), true, QObject::tr("static group"));
  swatch(group_color("dynamic"), group_color("dynamic"), false, QObject::tr("dynamic"));
  swatch(group_color("segment"), group_color("segment"), false, QObject::tr("segment"));
  swatch(kDroppedFill, kDroppedLine, false, QObject::tr("dropped"));
  swatch(QBrush(Qt::NoBrush), kRelevantColor, false, QObject::tr("relevant set"));
}

void ImportanceGraphView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  render_to(p, size());
}

QString ImportanceGraphView::describe_at(const QPoint& pos) const {
  const TraceStep* s = panel_->step();
  if (!s) return {};
  const double r = node_radius(size()) + 3;
  for (const TraceUnit& u : s->units) {
    const QPointF d = node_center(u.index, size()) - QPointF(pos);
    if (std::hypot(d.x(), d.y()) > r) continue;
    QString text = QObject::tr("unit %1 · %2 · %3\n%4\n%5 tokens at rows %6–%7")
                       .arg(u.index)
                       .arg(QString::fromStdString(u.kind), QString::fromStdString(u.key),
                            QString::fromStdString(u.label))
                       .arg(u.tokens)
                       .arg(u.begin)
                       .arg(u.begin + u.tokens - 1);
    text += u.members > 1 ? QObject::tr("\n%1 group of %2 segments")
                                .arg(QString::fromStdString(u.group))
                                .arg(u.members)
                          : QObject::tr("\n%1").arg(QString::fromStdString(u.group));
    text += contains(panel_->filled_units(), u.index)
                ? QObject::tr("\nrecomputed at layer %1").arg(panel_->layer_index())
                : QObject::tr("\nreused (dropped) at layer %1").arg(panel_->layer_index());
    const auto scores = panel_->scores();
    if (const auto it = scores.find(u.index); it != scores.end())
      text += QObject::tr("\nscore %1").arg(it->second, 0, 'g', 4);
    return text;
  }
  return {};
}

bool ImportanceGraphView::event(QEvent* event) {
  return answer_tooltip(this, event, [this](const QPoint& pos) { return describe_at(pos); }) ||
         QWidget::event(event);
}

ImportancePanel::ImportancePanel(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("importancePanel"));
  steps_ = new QComboBox(this);
  steps_->setObjectName(QStringLiteral("importanceSteps"));
  steps_->setMinimumContentsLength(16);
  layers_ = new QSlider(Qt::Horizontal, this);
  layers_->setObjectName(QStringLiteral("importanceLayer"));
  layers_->setRange(0, 0);
  layers_->setPageStep(1);
  layers_->setTickPosition(QSlider::TicksBelow);
  layer_label_ = new QLabel(this);
  layer_label_->setMinimumWidth(60);
  play_ = new QPushButton(tr("Play"), this);
  play_->setObjectName(QStringLiteral("importancePlay"));
  next_hop_ = new QPushButton(tr("Round ▶"), this);
  hop_label_ = new QLabel(this);
  auto* open = new QPushButton(tr("Open…"), this);
  graph_ = new ImportanceGraphView(this, this);
  strip_ = new UnitStateStrip(this, this);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  timer_ = new QTimer(this);
  timer_->setInterval(kDefaultHopMs);

  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Step"), this));
  bar->addWidget(steps_, 1);
  bar->addWidget(open);
  auto* layer_bar = new QHBoxLayout;
  layer_bar->addWidget(new QLabel(tr("Layer"), this));
  layer_bar->addWidget(layers_, 1);
  layer_bar->addWidget(layer_label_);
  layer_bar->addWidget(play_);
  layer_bar->addWidget(next_hop_);
  layer_bar->addWidget(hop_label_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(bar);
  layout->addLayout(layer_bar);
  layout->addWidget(graph_, 1);
  layout->addWidget(strip_);
  layout->addWidget(summary_);

  connect(steps_, &QComboBox::currentIndexChanged, this, [this](int i) { set_step(i); });
  connect(layers_, &QSlider::valueChanged, this, [this](int l) { set_layer(l); });
  connect(play_, &QPushButton::clicked, this, [this] { playing() ? pause() : play(); });
  connect(next_hop_, &QPushButton::clicked, this, [this] {
    pause();
    nextHop();
  });
  connect(open, &QPushButton::clicked, this, &ImportancePanel::loadTraceFile);
  connect(timer_, &QTimer::timeout, this, &ImportancePanel::nextHop);
  refresh();
}

const TraceStep* ImportancePanel::step() const {
  if (step_ < 0 || step_ >= step_count()) return nullptr;
  return &trace_.steps[static_cast<size_t>(step_)];
}

const TraceLayer* ImportancePanel::layer() const {
  const TraceStep* s = step();
  if (!s || layer_ < 0 || layer_ >= static_cast<int>(s->layers.size())) return nullptr;
  return &s->layers[static_cast<size_t>(layer_)];
}

int ImportancePanel::layer_count() const {
  const TraceStep* s = step();
  return s ? static_cast<int>(s->layers.size()) : 0;
}

bool ImportancePanel::open_trace_file(const QString& path, QString* error) {
  try {
    set_trace(read_recompute_trace(path.toStdString()));
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void ImportancePanel::loadTraceFile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open recompute trace"), QString(),
                                                    tr("Recompute traces (*.json);;All files (*)"));
  if (path.isEmpty()) return;
  QString error;
  if (!open_trace_file(path, &error)) QMessageBox::warning(this, tr("Recompute trace"), error);
}

void ImportancePanel::set_trace(RecomputeTrace trace) {
  pause();
  trace_ = std::move(trace);
  keys_.clear();
  states_.assign(trace_.steps.size(), {});
  std::set<std::string> seen;
  for (size_t s = 0; s < trace_.steps.size(); ++s)
    for (const TraceUnit& u : trace_.steps[s].units) {
      states_[s][u.key] = u.group;
      if (seen.insert(u.key).second) keys_.push_back(u.key);
    }
  steps_->blockSignals(true);
  steps_->clear();
  for (const TraceStep& s : trace_.steps)
    steps_->addItem(tr("step %1 · episode %2 · %3 units · %4")
                        .arg(s.step)
                        .arg(s.episode)
                        .arg(s.units.size())
                        .arg(QString::fromStdString(s.method)));
  steps_->blockSignals(false);
  step_ = 0;
  layer_ = 0;
  hop_ = -1;
  refresh();
}

void ImportancePanel::set_step(int index) {
  pause();
  step_ = std::clamp(index, 0, std::max(0, step_count() - 1));
  layer_ = std::clamp(layer_, 0, std::max(0, layer_count() - 1));
  hop_ = -1;
  refresh();
}

void ImportancePanel::set_layer(int layer) {
  pause();
  layer_ = std::clamp(layer, 0, std::max(0, layer_count() - 1));
  hop_ = -1;
  refresh();
}

std::vector<int64_t> ImportancePanel::filled_units() const {
  const TraceLayer* l = layer();
  return l ? l->units : std::vector<int64_t>{};
}

std::vector<int64_t> ImportancePanel::dropped_units() const {
  std::vector<int64_t> out;
  const TraceStep* s = step();
  if (!s) return out;
  const std::vector<int64_t> filled = filled_units();
  for (const TraceUnit& u : s->units)
    if (!contains(filled, u.index)) out.push_back(u.index);
  return out;
}

bool ImportancePanel::query_filled() const {
  const TraceLayer* l = layer();
  return l && l->query;
}

std::vector<ImportanceEdge> ImportancePanel::edges() const {
  std::vector<ImportanceEdge> out;
  const TraceLayer* l = layer();
  if (!l) return out;
  const UnitAttention& a = l->attention;
  const size_t n = a.units.size();
  for (size_t b = 0; b < n && b < a.from_query.size(); ++b)
    if (a.from_query[b] > 0) out.push_back({-1, a.units[b], a.from_query[b]});
  for (size_t i = 0; i < n && i < a.from_unit.size(); ++i)
    for (size_t b = 0; b < n && b < a.from_unit[i].size(); ++b)
      if (b != i && a.from_unit[i][b] > 0)  // a unit's own mass says nothing about the others
        out.push_back({a.units[i], a.units[b], a.from_unit[i][b]});
  std::stable_sort(out.begin(), out.end(), [](const ImportanceEdge& x, const ImportanceEdge& y) {
    return x.mass > y.mass;
  });
  if (out.empty()) return out;
  const double floor = out.front().mass * kEdgeFloor;
  size_t keep = 0;
  while (keep < out.size() && keep < size_t(kMaxEdges) && out[keep].mass >= floor)
    ++keep;
  out.resize(keep);
  return out;
}

int ImportancePanel::hop_count() const {
  const TraceLayer* l = layer();
  return l ? static_cast<int>(l->hops.size()) : 0;
}

std::vector<int64_t> ImportancePanel::highlighted_units() const {
  const TraceLayer* l = layer();
  if (!l || hop_ < 0 || hop_ >= hop_count()) return {};
  return l->hops[static_cast<size_t>(hop_)].relevant;
}

std::map<int64_t, double> ImportancePanel::scores() const {
  std::map<int64_t, double> out;
  const TraceLayer* l = layer();
  if (!l || hop_ < 0 || hop_ >= hop_count()) return out;
  const std::vector<double>& s = l->hops[static_cast<size_t>(hop_)].scores;
  for (size_t i = 0; i < s.size() && i < l->attention.units.size(); ++i)
    out[l->attention.units[i]] = s[i];
  return out;
}

bool ImportancePanel::playing() const {
  return timer_->isActive();
}

std::string ImportancePanel::unit_state(int step, const std::string& key) const {
  if (step < 0 || step >= static_cast<int>(states_.size())) return {};
  const auto& m = states_[static_cast<size_t>(step)];
  const auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

void ImportancePanel::play() {
  const int hops = hop_count();
  if (hops == 0) return;
  if (hop_ < 0 || hop_ >= hops - 1) hop_ = 0;
  if (hop_ < hops - 1) timer_->start();
  refresh();
}

void ImportancePanel::pause() {
  timer_->stop();
  if (play_) play_->setText(tr("Play"));
}

void ImportancePanel::nextHop() {
  const int hops = hop_count();
  if (hops == 0) return;
  if (hop_ < hops - 1) ++hop_;
  if (hop_ >= hops - 1) timer_->stop();
  refresh();
}

void ImportancePanel::setHopInterval(int ms) {
  timer_->setInterval(std::max(1, ms));
}

QString ImportancePanel::summary_text() const {
  const TraceStep* s = step();
  const TraceLayer* l = layer();
  if (!s || !l)
    return tr("No recompute trace: engram-cli eval keep --trace FILE writes one for KEEP.");
  QString text = tr("Step %1 (episode %2) · %3 · %4 units, %5 tokens (prefix %6, query %7)\n")
                     .arg(s->step)
                     .arg(s->episode)
                     .arg(QString::fromStdString(s->spec))
                     .arg(s->units.size())
                     .arg(s->total_tokens)
                     .arg(s->prefix_tokens)
                     .arg(s->query_tokens);
  text += tr("Layer %1 recomputes %2 rows: units %3%4")
              .arg(l->layer)
              .arg(l->rows)
              .arg(list_text(l->units), l->query ? tr(" and the query") : QString());
  if (hop_ >= 0 && hop_ < hop_count())
    text +=
        tr("\nRound %1 of %2: relevant set %3%4")
            .arg(hop_ + 1)
            .arg(hop_count())
            .arg(list_text(highlighted_units()))
            .arg(hop_ + 1 == hop_count() ? tr(" = layer %1's units").arg(l->layer + 1) : QString());
  return text;
}

bool ImportancePanel::export_png(const QString& path) const {
  QImage image(graph_->size().expandedTo(QSize(640, 520)), QImage::Format_ARGB32_Premultiplied);
  QPainter p(&image);
  graph_->render_to(p, image.size());
  p.end();
  return image.save(path, "PNG");
}

void ImportancePanel::refresh() {
  const int layers = layer_count();
  layers_->blockSignals(true);
  layers_->setRange(0, std::max(0, layers - 1));
  layers_->setValue(layer_);
  layers_->setEnabled(layers > 1);
  layers_->blockSignals(false);
  steps_->blockSignals(true);
  if (step_count() > 0) steps_->setCurrentIndex(step_);
  steps_->blockSignals(false);
  layer_label_->setText(layers > 0 ? tr("%1 / %2").arg(layer_).arg(layers - 1) : QString());
  const int hops = hop_count();
  play_->setEnabled(hops > 0);
  play_->setText(playing() ? tr("Pause") : tr("Play"));
  next_hop_->setEnabled(hops > 0 && hop_ < hops - 1);
  hop_label_->setText(hops == 0  ? tr("no rounds")
                      : hop_ < 0 ? tr("%1 rounds").arg(hops)
                                 : tr("round %1/%2").arg(hop_ + 1).arg(hops));
  summary_->setText(summary_text());
  graph_->update();
  strip_->update();
  Q_EMIT shown();
}

}  // namespace engram::ui
