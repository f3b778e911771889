// The EpiCache episodes panel (ui/episodes_panel.h), offscreen, on the trace engram-cli wrote on
// engram-tiny (tests/data/episode-trace/trace.json) and on hand-made steps: it opens the file and
// refuses a bad one; the slider steps through the trace; the scatter paints each episode's colour
// at its projected centroid and at its windows, the query's star where the query projects; the
// budget bars are equal when uniform and proportional when not; the size chart stacks each
// episode's cache tokens; live steps appended are followed only from the last step. With
// ENGRAM_EPISODES_SCREENSHOT=FILE it saves the panel on the fixture there.
#include <QImage>
#include <QLabel>
#include <QPainter>
#include <QSignalSpy>
#include <QSlider>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <set>

#include "core/policies/episode_trace.h"
#include "ui/episodes_panel.h"

using namespace engram;
using engram::ui::EpisodesPanel;

namespace {

const QString kFixture = QStringLiteral(ENGRAM_TEST_DATA "/episode-trace/trace.json");
const QSize kScatter(700, 520);
const QSize kChart(420, 200);

template <class View>
QImage render(const View* view, const QSize& size) {
  QImage image(size, QImage::Format_ARGB32);
  QPainter p(&image);
  view->render_to(p, size);
  p.end();
  return image;
}

QColor at(const QImage& image, const QPointF& p) {
  return image.pixelColor(QPoint(int(std::lround(p.x())), int(std::lround(p.y()))));
}

double distance(const QPointF& a, const QPointF& b) {
  return std::hypot(a.x() - b.x(), a.y() - b.y());
}

double to_segment(const QPointF& p, const QPointF& a, const QPointF& b) {
  const QPointF d = b - a;
  const double len2 = d.x() * d.x() + d.y() * d.y();
  const double t =
      len2 > 0 ? std::clamp(((p - a).x() * d.x() + (p - a).y() * d.y()) / len2, 0.0, 1.0) : 0.0;
  return distance(p, a + t * d);
}

// Two episodes of two windows each in 2D, routed to `routed`; episode 1 has its own budgets.
EpisodeTraceStep hand_made_step(int64_t turn, int64_t routed, int64_t tokens) {
  EpisodeTraceStep s;
  s.turn = turn;
  s.spec = "epicache";
  s.budget = 64;
  s.layers = 4;
  const std::vector<Embedding> w = {{1, 0}, {0.9f, 0.3f}, {-1, 0.1f}, {-0.8f, -0.4f}};
  for (size_t i = 0; i < w.size(); ++i)
    s.windows.push_back({int64_t(i), int64_t(4 * i), int64_t(4 * i + 4), "window", w[i]});
  s.episodes.push_back({0, {1, 0.15f}, 0, {0, 1}, tokens, 0, turn == 0, {}});
  s.episodes.push_back({1, {-0.9f, -0.15f}, 3, {2, 3}, tokens / 2, 5, false, {80, 64, 40, 72}});
  s.query = {"where?", {0.2f, 0.9f}, routed, {0.3, -0.2}, false, kNoNewEpisodes};
  return s;
}

}  // namespace

class UiEpisodesTest : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  EpisodeTrace fixture_;

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY2(QFile::exists(kFixture), qPrintable(kFixture));
    fixture_ = read_episode_trace(kFixture.toStdString());
  }

  void opensTheFileAndRefusesABadOne() {
    EpisodesPanel panel;
    QCOMPARE(panel.step_count(), 0);
    QVERIFY(!panel.step());
    QVERIFY(panel.layer_budgets().empty());
    QString error;
    QVERIFY2(panel.open_trace_file(kFixture, &error), qPrintable(error));
    QCOMPARE(panel.step_count(), int(fixture_.steps.size()));
    QCOMPARE(panel.step_index(), 0);
    QCOMPARE(panel.step_slider()->maximum(), panel.step_count() - 1);
    QVERIFY(panel.step_slider()->isEnabled());

    const QString bad = dir_.filePath(QStringLiteral("bad.json"));
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"format\": \"engram-episode-trace\", \"version\": 1, \"steps\": [");
    f.close();
    QVERIFY(!panel.open_trace_file(bad, &error));
    QVERIFY2(error.contains(QStringLiteral("bad.json: not JSON")), qPrintable(error));
    QCOMPARE(panel.step_count(), int(fixture_.steps.size()));  // the trace shown stays
  }

  void theSliderStepsThroughTheTrace() {
    EpisodesPanel panel;
    QVERIFY(panel.open_trace_file(kFixture));
    QSignalSpy shown(&panel, &EpisodesPanel::shown);
    std::set<int64_t> routed;
    for (int s = 0; s < panel.step_count(); ++s) {
      panel.step_slider()->setValue(s);  // as a drag does
      QCOMPARE(panel.step_index(), s);
      const EpisodeTraceStep& want = fixture_.steps[size_t(s)];
      QCOMPARE(panel.step()->turn, want.turn);
      QCOMPARE(panel.plane().windows.size(), want.windows.size());
      QCOMPARE(panel.plane().centroids.size(), want.episodes.size());
      const QString side = panel.routing_text();
      QVERIFY2(side.contains(QStringLiteral("routed to <b>E%1</b>").arg(want.query.episode)),
               qPrintable(side));
      QVERIFY(side.contains(QString::fromStdString(want.query.label).toHtmlEscaped()));
      QVERIFY(side.contains(QString::number(want.query.cosines[0], 'f', 3)));
      routed.insert(want.query.episode);
      // Every window is in exactly the episode whose members list it.
      for (const EpisodeTraceEpisode& e : want.episodes)
        for (int64_t w : e.members)
          QCOMPARE(panel.episode_of_window(w), e.index);
    }
    QVERIFY(shown.count() >= panel.step_count() - 1);
    QVERIFY(routed.size() >= 2);  // the fixture routes to more than one episode
    panel.set_step(99);
    QCOMPARE(panel.step_index(), panel.step_count() - 1);
    QCOMPARE(panel.step_slider()->value(), panel.step_count() - 1);
  }

  // The picture: each episode's colour at its projected centroid and at its member windows, the
  // query's star at the query.
  void theScatterPaintsEpisodesWhereTheyProject() {
    EpisodesPanel panel;
    QVERIFY(panel.open_trace_file(kFixture));
    int centroids_checked = 0, windows_checked = 0;
    for (int s = 0; s < panel.step_count(); ++s) {
      panel.set_step(s);
      const auto* view = panel.scatter();
      const QImage image = render(view, kScatter);
      const EpisodeTraceStep& step = *panel.step();
      const QPointF q = view->query_position(kScatter);
      QCOMPARE(at(image, q), EpisodesPanel::query_color());
      const QPointF routed = view->centroid_position(step.query.episode, kScatter);
      // The view keeps the plane's proportions (one scale on both axes, y upwards): screen
      // offsets between centroids are the plane's, scaled.
      const EpisodeStepPlane plane = project_step(step);
      const QPointF c0 = view->centroid_position(0, kScatter);
      double scale = 0;
      for (size_t e = 1; e < plane.centroids.size(); ++e) {
        const double dx = plane.centroids[e].x - plane.centroids[0].x;
        const double dy = plane.centroids[e].y - plane.centroids[0].y;
        const QPointF d = view->centroid_position(int64_t(e), kScatter) - c0;
        if (scale == 0) scale = std::hypot(d.x(), d.y()) / std::hypot(dx, dy);
        QVERIFY(std::abs(d.x() - dx * scale) < 1e-6 && std::abs(d.y() + dy * scale) < 1e-6);
      }
      QVERIFY(scale > 0);
      for (const EpisodeTraceEpisode& e : step.episodes) {
        const QPointF c = view->centroid_position(e.index, kScatter);
        QVERIFY(QRectF(QPointF(0, 0), kScatter).contains(c));
        bool covered = distance(c, q) < view->kQueryRadius + view->kCentroidRadius + 2;
        for (const EpisodeTraceEpisode& later : step.episodes)
          covered |= later.index > e.index &&
                     distance(c, view->centroid_position(later.index, kScatter)) < 30;
        if (covered) continue;
        QCOMPARE(at(image, c), EpisodesPanel::episode_color(e.index));
        ++centroids_checked;
      }
      for (const EpisodeTraceWindow& w : step.windows) {
        const QPointF p = view->window_position(w.index, kScatter);
        bool covered = distance(p, q) < 20 || to_segment(p, q, routed) < 4;
        for (const EpisodeTraceEpisode& e : step.episodes) {
          const QPointF c = view->centroid_position(e.index, kScatter);
          covered |= distance(p, c) < 20;
          covered |= QRectF(c.x() + 10, c.y() - 26, 44, 18).contains(p);  // its "E2" label
          if (e.medoid >= 0 && e.medoid != w.index)
            covered |= distance(p, view->window_position(e.medoid, kScatter)) < 14;
        }
        if (covered) continue;
        QCOMPARE(at(image, p), EpisodesPanel::episode_color(panel.episode_of_window(w.index)));
        ++windows_checked;
      }
    }
    QVERIFY2(centroids_checked >= panel.step_count() * 2,
             qPrintable(QString::number(centroids_checked)));
    QVERIFY2(windows_checked >= panel.step_count() * 2,
             qPrintable(QString::number(windows_checked)));
    // The episodes' colours are distinct: a window painted in another episode's colour fails.
    std::set<QRgb> colours;
    for (int64_t e = 0; e < 10; ++e)
      colours.insert(EpisodesPanel::episode_color(e).rgb());
    QCOMPARE(colours.size(), size_t(10));
  }

  void budgetBarsAreEqualWhenUniformAndProportionalWhenNot() {
    EpisodesPanel panel;
    QVERIFY(panel.open_trace_file(kFixture));
    const EpisodeTraceStep& s = *panel.step();
    QVERIFY(panel.budgets_uniform());
    QCOMPARE(panel.layer_budgets(), std::vector<int64_t>(size_t(s.layers), s.budget));
    const auto* bars = panel.budget_bars();
    const QImage image = render(bars, kChart);
    const QRectF first = bars->bar_rect(0, kChart);
    QVERIFY(first.height() > 50);
    for (int l = 0; l < s.layers; ++l) {
      const QRectF r = bars->bar_rect(l, kChart);
      QCOMPARE(r.height(), first.height());
      if (l > 0) QVERIFY(r.left() > bars->bar_rect(l - 1, kChart).right());
      QCOMPARE(at(image, r.center()), EpisodesPanel::episode_color(s.query.episode));
    }
    QVERIFY(bars->bar_rect(int(s.layers), kChart).isNull());

    // Episode 1's own budgets when the query is routed there; the uniform budget for episode 0.
    EpisodeTrace t;
    t.steps = {hand_made_step(0, 1, 60), hand_made_step(1, 0, 64)};
    panel.load(t);
    QVERIFY(!panel.budgets_uniform());
    QCOMPARE(panel.layer_budgets(), (std::vector<int64_t>{80, 64, 40, 72}));
    const QRectF top = bars->bar_rect(0, kChart);
    for (int l = 1; l < 4; ++l)
      QVERIFY(std::abs(bars->bar_rect(l, kChart).height() / top.height() -
                       panel.layer_budgets()[size_t(l)] / 80.0) < 1e-9);
    const QImage calibrated = render(bars, kChart);
    QCOMPARE(at(calibrated, bars->bar_rect(2, kChart).center()), EpisodesPanel::episode_color(1));
    panel.set_step(1);
    QCOMPARE(panel.layer_budgets(), (std::vector<int64_t>{64, 64, 64, 64}));
  }

  void theSizeChartStacksEachEpisodesCache() {
    EpisodesPanel panel;
    EpisodeTrace t;
    t.steps = {hand_made_step(0, 0, 40), hand_made_step(1, 1, 64), hand_made_step(2, 0, 20)};
    panel.load(t);
    QCOMPARE(panel.cache_tokens(1, 1), int64_t(32));
    QCOMPARE(panel.cache_tokens(1, 2), int64_t(-1));
    QCOMPARE(panel.most_episodes(), int64_t(2));
    const auto* chart = panel.size_chart();
    const QImage image = render(chart, kChart);
    for (int s = 0; s < 3; ++s)
      for (int64_t e = 0; e < 2; ++e)
        QCOMPARE(at(image, chart->point_at(s, e, kChart)), EpisodesPanel::episode_color(e));
    // Episode 1 sits on episode 0; a bigger cache is a taller band.
    QVERIFY(chart->point_at(1, 1, kChart).y() < chart->point_at(1, 0, kChart).y());
    QVERIFY(chart->point_at(1, 0, kChart).y() < chart->point_at(2, 0, kChart).y());
    QVERIFY(chart->point_at(0, 0, kChart).x() < chart->point_at(1, 0, kChart).x());
    // A click picks the step.
    panel.size_chart()->resize(kChart);
    QTest::mouseClick(panel.size_chart(), Qt::LeftButton, {},
                      chart->point_at(2, 0, kChart).toPoint());
    QCOMPARE(panel.step_index(), 2);
  }

  void liveStepsAreFollowedFromTheLastStep() {
    EpisodesPanel panel;
    QVERIFY(panel.append_step(hand_made_step(0, 0, 10)));
    QCOMPARE(panel.step_index(), 0);
    QVERIFY(panel.append_step(hand_made_step(1, 1, 20)));
    QCOMPARE(panel.step_count(), 2);
    QCOMPARE(panel.step_index(), 1);  // followed
    QCOMPARE(panel.step_slider()->value(), 1);
    panel.set_step(0);
    QVERIFY(panel.append_step(hand_made_step(2, 0, 30)));
    QCOMPARE(panel.step_count(), 3);
    QCOMPARE(panel.step_index(), 0);  // the person looks at an older step: it stays
    EpisodeTraceStep bad = hand_made_step(3, 0, 40);
    bad.episodes[1].medoid = 9;
    QString error;
    QVERIFY(!panel.append_step(bad, &error));
    QVERIFY2(error.contains(QStringLiteral("medoid 9")), qPrintable(error));
    QCOMPARE(panel.step_count(), 3);
    // A step whose query opened an episode (no medoid, no cosine yet for it).
    EpisodeTraceStep created = hand_made_step(4, 1, 50);
    created.episodes[1].medoid = -1;
    created.query.cosines = {0.1};
    created.query.created = true;
    created.query.tau = 0.2;
    panel.set_step(2);
    QVERIFY2(panel.append_step(created, &error), qPrintable(error));
    QCOMPARE(panel.step_index(), 3);
    QVERIFY(panel.routing_text().contains(QStringLiteral("a new episode")));
    const QImage image = render(panel.scatter(), kScatter);
    QCOMPARE(at(image, panel.scatter()->query_position(kScatter)), EpisodesPanel::query_color());
  }

  void rendersTheWholePanel() {
    EpisodesPanel panel;
    QVERIFY(panel.open_trace_file(kFixture));
    panel.resize(980, 760);
    const QImage image = panel.grab().toImage();
    QCOMPARE(image.size(), QSize(980, 760));
    std::set<QRgb> colors;
    for (int y = 0; y < image.height(); y += 5)
      for (int x = 0; x < image.width(); x += 5)
        colors.insert(image.pixel(x, y));
    QVERIFY(colors.size() > 20);
    const QString png = dir_.filePath(QStringLiteral("panel.png"));
    QVERIFY(panel.export_png(png));
    QCOMPARE(QImage(png).size(), QSize(980, 760));
    const QString shot = qEnvironmentVariable("ENGRAM_EPISODES_SCREENSHOT");
    if (!shot.isEmpty()) {
      panel.set_step(1);
      QVERIFY(panel.export_png(shot));
    }
  }
};

QTEST_MAIN(UiEpisodesTest)
#include "test_ui_episodes.moc"
