// The layer timeline's model: built from the file `engram-cli --trace` writes, it holds every
// interval of each request, one row per layer, and idle gaps that are exactly the parts of the
// request where its lane ran nothing; a file's requests stay apart from the app's own; the view
// zooms and pans, its tooltips give durations and bytes; exports write PNG and SVG; OxyGen's
// frame events get a row per frame; a LouisKV reply's retrieval map comes with its trace and
// shows where each layer retrieved and what it loaded.
#include <QFile>
#include <QImage>
#include <QPainter>
#include <QProcess>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTextStream>
#include <QWheelEvent>
#include <QtTest>
#include <algorithm>

#include "ui/retrieval_map_view.h"
#include "ui/timeline_model.h"
#include "ui/timeline_panel.h"

using engram::LayerInterval;
using engram::RetrievalMap;
using engram::TraceLane;
using engram::ui::RequestTimeline;
using engram::ui::TimelineModel;

namespace {

LayerInterval interval(int64_t layer, TraceLane lane, double start, double end,
                       int64_t request = 7) {
  LayerInterval i;
  i.request = request;
  i.phase = "decode";
  i.layer = layer;
  i.lane = lane;
  i.what = lane == TraceLane::kCopy ? "kv_copy" : "layer";
  i.start_us = start;
  i.end_us = end;
  i.bytes = lane == TraceLane::kCopy ? 4096 : 0;
  i.device = "cpu";
  i.clock = "wall";
  return i;
}

}  // namespace

class UiTimelineTest : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;

 private Q_SLOTS:
  void gapsAreTheIdleSpansOfEachLane() {
    TimelineModel model(0.5);
    // Compute: [0,10) layer 0, [10,20) layer 1, idle [20,35), [35,40) lm head, idle [40,50)?
    // The request ends with a copy at [45,50), so compute is idle [40,50) too.
    model.add(interval(0, TraceLane::kCompute, 0, 10));
    model.add(interval(1, TraceLane::kCompute, 10, 20));
    model.add(interval(-1, TraceLane::kCompute, 35, 40));
    model.add(interval(1, TraceLane::kCopy, 5, 12));
    model.add(interval(0, TraceLane::kCopy, 45, 50));
    const RequestTimeline* t = model.request(7);
    QVERIFY(t);
    QCOMPARE(t->intervals.size(), size_t(5));
    QCOMPARE(t->layers, int64_t(2));
    QVERIFY(t->has_other);
    QCOMPARE(t->rows(), 3);
    QCOMPARE(t->start_us, 0.0);
    QCOMPARE(t->end_us, 50.0);
    std::vector<std::tuple<int, double, double>> gaps;
    for (const auto& g : t->gaps)
      gaps.emplace_back(int(g.lane), g.start_us, g.end_us);
    const std::vector<std::tuple<int, double, double>> expected = {
        {1, 0, 5}, {1, 12, 45}, {0, 20, 35}, {0, 40, 50}};
    auto sorted = gaps;
    auto want = expected;
    std::sort(sorted.begin(), sorted.end());
    std::sort(want.begin(), want.end());
    QCOMPARE(sorted, want);
    QCOMPARE(t->busy_us[0], 25.0);
    QCOMPARE(t->busy_us[1], 12.0);
    QVERIFY(model.request(8) == nullptr);
  }

  void recordedTraceFileHasTheRightIntervalsAndGaps() {
    QVERIFY(dir_.isValid());
    const QString cli = QStringLiteral(ENGRAM_BINARY_DIR "/app/cli/engram-cli");
    if (!QFile::exists(cli)) QSKIP("engram-cli is not built");
    const QString trace = dir_.filePath(QStringLiteral("trace.jsonl"));
    QProcess p;
    p.start(cli, {QStringLiteral("generate"), QStringLiteral("--model"),
                  QStringLiteral(ENGRAM_TEST_DATA "/models/llama-gqa"), QStringLiteral("--prompt"),
                  QStringLiteral("The timeline of a request"), QStringLiteral("--max-tokens"),
                  QStringLiteral("12"), QStringLiteral("--trace"), trace});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());

    QFile file(trace);
    QVERIFY(file.open(QIODevice::ReadOnly));
    std::vector<LayerInterval> lines;
    while (!file.atEnd()) {
      const QByteArray line = file.readLine().trimmed();
      if (!line.isEmpty()) lines.push_back(engram::parse_json_line(line.toStdString()));
    }
    QVERIFY(!lines.empty());

    TimelineModel model(0.0);
    model.load_trace_file(trace);
    QCOMPARE(model.requests().size(), size_t(1));
    const RequestTimeline* t = model.request(model.requests().front());
    QCOMPARE(t->intervals.size(), lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      QCOMPARE(t->intervals[i].start_us, lines[i].start_us);
      QCOMPARE(t->intervals[i].end_us, lines[i].end_us);
      QCOMPARE(t->intervals[i].layer, lines[i].layer);
    }
    QCOMPARE(t->layers, int64_t(2));  // the fixture's layers
    // Every decode step computes every layer: 1 prefill + 11 fed-back tokens.
    int64_t layer0 = 0;
    for (const auto& i : t->intervals)
      layer0 += i.layer == 0 && i.lane == TraceLane::kCompute;
    QCOMPARE(layer0, int64_t(12));
    // Gaps and busy time partition the request on the compute lane, and no gap overlaps work.
    double idle = 0;
    for (const auto& g : t->gaps) {
      QVERIFY(g.lane == TraceLane::kCompute);  // the CPU has no copy lane
      QVERIFY(g.end_us > g.start_us);
      idle += g.duration_us();
      for (const auto& i : t->intervals) {
        QVERIFY2(i.end_us <= g.start_us + 1e-6 || i.start_us >= g.end_us - 1e-6,
                 "a gap overlaps an interval");
      }
    }
    QVERIFY(qAbs(idle + t->busy_us[0] - (t->end_us - t->start_us)) < 1e-3);
    // Sampling between decode steps runs on the host: there are gaps.
    QVERIFY(t->gaps.size() >= 11);
  }

  void exportsPngAndSvg() {
    TimelineModel source;
    engram::ui::TimelinePanel panel;
    panel.resize(900, 300);
    std::vector<LayerInterval> v = {interval(0, TraceLane::kCompute, 0, 10),
                                    interval(1, TraceLane::kCompute, 12, 20),
                                    interval(1, TraceLane::kCopy, 2, 9)};
    panel.addIntervals(QVector<LayerInterval>(v.begin(), v.end()));
    QCOMPARE(panel.model().requests().size(), size_t(1));
    const QString png = dir_.filePath(QStringLiteral("t.png"));
    const QString svg = dir_.filePath(QStringLiteral("t.svg"));
    QVERIFY(panel.export_png(png));
    QVERIFY(panel.export_svg(svg));
    QImage image(png);
    QVERIFY(!image.isNull());
    QFile f(svg);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QVERIFY(f.readAll().contains("<svg"));
    // Tooltips name the interval under the cursor.
    panel.show();
    panel.view()->fit();
    const QString tip = panel.view()->describe_at(QPoint(panel.view()->width() / 4, 22 + 3));
    QVERIFY2(tip.contains(QStringLiteral("layer 0")), qPrintable(tip));
  }

  void aTraceFilesRequestsStayApartFromTheAppsOwn() {
    TimelineModel model(0.5);
    model.add(interval(0, TraceLane::kCompute, 0, 10, 1));  // the app's request 1
    const QString path = dir_.filePath(QStringLiteral("other.jsonl"));
    {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Text));
      QTextStream out(&f);
      // Another process's requests 1 and 2.
      for (const auto& i :
           {interval(0, TraceLane::kCompute, 0, 4, 1), interval(1, TraceLane::kCompute, 4, 8, 1),
            interval(0, TraceLane::kCompute, 0, 3, 2)})
        out << QString::fromStdString(engram::to_json_line(i)) << "\n";
    }
    const std::vector<int64_t> keys = model.load_trace_file(path);
    QCOMPARE(keys.size(), size_t(2));
    QCOMPARE(model.requests().size(), size_t(3));
    QCOMPARE(model.request(1)->intervals.size(), size_t(1));  // untouched
    QCOMPARE(model.request(keys[0])->intervals.size(), size_t(2));
    QCOMPARE(model.request(keys[0])->request, int64_t(1));
    QCOMPARE(model.request(keys[1])->intervals.size(), size_t(1));
    QCOMPARE(model.label(keys[0]), QStringLiteral("other.jsonl #1"));
    QCOMPARE(model.label(1), QStringLiteral("#1"));
    // Loading it again adds two more requests; the app's next request still has its own row.
    QCOMPARE(model.load_trace_file(path).size(), size_t(2));
    model.add(interval(0, TraceLane::kCompute, 0, 10, 2));
    QCOMPARE(model.requests().size(), size_t(6));
    QCOMPARE(model.request(2)->intervals.size(), size_t(1));

    // A bad line names the file and line, and adds nothing.
    const QString bad = dir_.filePath(QStringLiteral("bad.jsonl"));
    {
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Text));
      f.write(
          QByteArray::fromStdString(engram::to_json_line(interval(0, TraceLane::kCompute, 0, 1))));
      f.write("\n{not json\n");
    }
    try {
      model.load_trace_file(bad);
      QFAIL("a bad line was accepted");
    } catch (const std::runtime_error& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("bad.jsonl:2")), e.what());
    }
    QCOMPARE(model.requests().size(), size_t(6));
  }

  void onlyTheLatestLiveRequestsAreKept() {
    TimelineModel model(0.5, 3);
    for (int64_t r = 1; r <= 5; ++r)
      model.add(interval(0, TraceLane::kCompute, 0, 1, r));
    const std::vector<int64_t> expected = {3, 4, 5};
    QCOMPARE(model.requests(), expected);
  }

  void viewZoomsAndPans() {
    engram::ui::TimelinePanel panel;
    panel.resize(900, 300);
    std::vector<LayerInterval> v = {interval(0, TraceLane::kCompute, 0, 1000),
                                    interval(1, TraceLane::kCompute, 1000, 2000)};
    panel.addIntervals(QVector<LayerInterval>(v.begin(), v.end()));
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    engram::ui::TimelineView* view = panel.view();
    view->fit();
    const double span = view->view_end_us() - view->view_start_us();
    QVERIFY(view->view_start_us() <= 0 && view->view_end_us() >= 2000);
    // Wheel up zooms in around the cursor: the time under it stays put.
    const QPointF at(view->width() * 0.75, 40);
    auto time_at = [&](double x) {
      return view->view_start_us() +
             (x - 64) / (view->width() - 64) * (view->view_end_us() - view->view_start_us());
    };
    const double before = time_at(at.x());
    QWheelEvent wheel(at, view->mapToGlobal(at), QPoint(), QPoint(0, 240), Qt::NoButton,
                      Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(view, &wheel);
    const double zoomed = view->view_end_us() - view->view_start_us();
    QVERIFY2(zoomed < span * 0.7, qPrintable(QStringLiteral("%1 -> %2").arg(span).arg(zoomed)));
    QVERIFY(qAbs(time_at(at.x()) - before) < 1e-6 * span + 1e-9);
    // Dragging right moves the view to earlier times by the dragged distance.
    const double start = view->view_start_us();
    QTest::mousePress(view, Qt::LeftButton, Qt::NoModifier, QPoint(400, 40));
    QMouseEvent move(QEvent::MouseMove, QPointF(500, 40), view->mapToGlobal(QPointF(500, 40)),
                     Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(view, &move);
    QTest::mouseRelease(view, Qt::LeftButton, Qt::NoModifier, QPoint(500, 40));
    const double moved = start - view->view_start_us();
    QVERIFY(qAbs(moved - 100.0 / (view->width() - 64) * zoomed) < 1e-6 * zoomed);
    QVERIFY(qAbs((view->view_end_us() - view->view_start_us()) - zoomed) < 1e-6 * zoomed);
    // Shift+wheel pans without zooming.
    const double start2 = view->view_start_us();
    QWheelEvent shift(at, view->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton,
                      Qt::ShiftModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(view, &shift);
    QVERIFY(view->view_start_us() != start2);
    QVERIFY(qAbs((view->view_end_us() - view->view_start_us()) - zoomed) < 1e-6 * zoomed);
    // Fit shows the whole request again; + and - zoom by two.
    QPushButton* fit = nullptr;
    QPushButton* plus = nullptr;
    for (auto* b : panel.findChildren<QPushButton*>()) {
      if (b->text() == QStringLiteral("Fit")) fit = b;
      if (b->text() == QStringLiteral("+")) plus = b;
    }
    QVERIFY(fit && plus);
    fit->click();
    QVERIFY(qAbs((view->view_end_us() - view->view_start_us()) - span) < 1e-6 * span);
    plus->click();
    QVERIFY(qAbs((view->view_end_us() - view->view_start_us()) - span / 2) < 1e-6 * span);
  }

  // engram-cli bench oxygen --trace writes one request per frame; the panel shows them as a
  // "frames" view with a row per frame: each frame prefills the shared prompt once and runs its
  // action, language steps are batched across frames, and the row after the last frame holds the
  // language steps that finish the open requests.
  void oxygenFramesGetARowEach() {
    const QString cli = QStringLiteral(ENGRAM_BINARY_DIR "/app/cli/engram-cli");
    if (!QFile::exists(cli)) QSKIP("engram-cli is not built");
    const QString trace = dir_.filePath(QStringLiteral("oxygen.jsonl"));
    QProcess p;
    p.start(cli, {QStringLiteral("bench"), QStringLiteral("oxygen"), QStringLiteral("--model"),
                  QStringLiteral(ENGRAM_TEST_DATA "/../../resources/models/engram-tiny"),
                  QStringLiteral("--frames"), QStringLiteral("2"), QStringLiteral("--mode"),
                  QStringLiteral("unified"), QStringLiteral("--action-tokens"), QStringLiteral("4"),
                  QStringLiteral("--narration-tokens"), QStringLiteral("4"),
                  QStringLiteral("--note-tokens"), QStringLiteral("4"), QStringLiteral("--trace"),
                  trace});
    QVERIFY(p.waitForFinished(300000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());

    engram::ui::TimelinePanel panel;
    QString error;
    QVERIFY2(panel.open_trace_file(trace, &error), qPrintable(error));
    const RequestTimeline* t = panel.model().request(panel.shown_request());
    QVERIFY(t && t->frame_rows);  // the frames view comes first
    QVERIFY(panel.model().label(t->key).endsWith(QStringLiteral("frames (unified)")));
    int views = 0;
    for (int64_t key : panel.model().requests())
      views += panel.model().request(key)->frame_rows ? 1 : 0;
    QCOMPARE(views, 1);
    QVERIFY(t->rows() == 2 || t->rows() == 3);
    for (int64_t frame = 0; frame < t->rows(); ++frame) {
      const auto count = [&](const char* what) {
        return std::count_if(t->intervals.begin(), t->intervals.end(), [&](const LayerInterval& i) {
          return i.layer == frame && i.what == what;
        });
      };
      QCOMPARE(count("action"), frame < 2 ? 1L : 0L);
      QCOMPARE(count("prefill"), frame < 2 ? 1L : 0L);
      QVERIFY(count("language_step") >= (frame < 2 ? 0L : 1L));
    }
    // The view draws a row per frame, and its tooltip names the frame.
    panel.resize(900, 300);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    engram::ui::TimelineView* view = panel.view();
    view->fit();
    const LayerInterval& first = t->intervals.front();
    const double mid = (first.start_us + first.end_us) / 2;
    const int x =
        int(64 + (mid - view->view_start_us()) / (view->view_end_us() - view->view_start_us()) *
                     (view->width() - 64));
    const QString tip = view->describe_at(QPoint(x, 22 + int(first.layer) * 27 + 5));
    QVERIFY2(tip.contains(QStringLiteral("frame %1").arg(first.layer)), qPrintable(tip));
  }

  void tooltipsGiveDurationsBytesAndIdleTime() {
    engram::ui::TimelinePanel panel;
    panel.resize(900, 300);
    std::vector<LayerInterval> v = {interval(0, TraceLane::kCompute, 0, 1000),
                                    interval(0, TraceLane::kCopy, 0, 500),
                                    interval(1, TraceLane::kCompute, 1500, 2000)};
    panel.addIntervals(QVector<LayerInterval>(v.begin(), v.end()));
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    engram::ui::TimelineView* view = panel.view();
    view->fit();
    auto x_of = [&](double us) {
      return int(64 + (us - view->view_start_us()) / (view->view_end_us() - view->view_start_us()) *
                          (view->width() - 64));
    };
    // Row 0: compute lane at y 22..32, copy lane at 33..43 (rows are 27 px).
    const QString compute = view->describe_at(QPoint(x_of(500), 22 + 5));
    QVERIFY2(compute.contains(QStringLiteral("duration 1.00 ms")), qPrintable(compute));
    const QString copy = view->describe_at(QPoint(x_of(250), 22 + 11 + 5));
    QVERIFY2(copy.contains(QStringLiteral("4.0 KiB moved")), qPrintable(copy));
    QVERIFY2(copy.contains(QStringLiteral("duration 500.0 µs")), qPrintable(copy));
    const QString idle = view->describe_at(QPoint(x_of(1250), 22 + 5));
    QVERIFY2(idle.contains(QStringLiteral("idle compute lane · 500.0 µs")), qPrintable(idle));
  }

  // A reply decoded through LouisKV: `engram-cli --trace` writes its retrieval map beside the
  // intervals, and the panel's Retrievals button shows it. Layer 1 retrieves at the first step and
  // where r_t fell below τ (0.58: this fixture's r_t lie around it, so some steps retrieve and
  // some do not); its cells say what they loaded, layer 0 (a full layer) says it attends
  // over every token; the exports draw the map.
  void louisKvReplysRetrievalMap() {
    QVERIFY(dir_.isValid());
    const QString cli = QStringLiteral(ENGRAM_BINARY_DIR "/app/cli/engram-cli");
    if (!QFile::exists(cli)) QSKIP("engram-cli is not built");
    const QString trace = dir_.filePath(QStringLiteral("louiskv.jsonl"));
    QString prompt;
    for (int i = 0; i < 12; ++i)
      prompt += QStringLiteral("The kitchen has a red kettle and the hall has a blue door. ");
    QProcess p;
    p.start(
        cli,
        {QStringLiteral("generate"), QStringLiteral("--model"),
         QStringLiteral(ENGRAM_TEST_DATA "/models/llama-gqa"), QStringLiteral("--prompt"), prompt,
         QStringLiteral("--max-tokens"), QStringLiteral("24"), QStringLiteral("--policy"),
         QStringLiteral("louiskv:full_layers=1,sinks=4,window=16,budget=32,cluster=4,tau=58"),
         QStringLiteral("--trace"), trace});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());

    engram::ui::TimelinePanel panel;
    panel.resize(900, 320);
    QString error;
    QVERIFY2(panel.open_trace_file(trace, &error), qPrintable(error));
    const RequestTimeline* t = panel.model().request(panel.shown_request());
    QVERIFY(t && t->retrieval);
    QVERIFY(!t->intervals.empty());
    const RetrievalMap& m = *t->retrieval;
    QCOMPARE(m.layers, int64_t{2});
    QCOMPARE(m.full_layers, int64_t{1});
    QCOMPARE(m.steps, int64_t{23});  // 24 tokens: the first from the prefill
    QCOMPARE(m.tau, 0.58);
    QCOMPARE(m.budget, int64_t{32});
    QVERIFY(!m.retrievals.empty());
    int64_t below = 0;
    for (int64_t step = 0; step < m.steps; ++step) {
      QVERIFY(std::isnan(m.similarity_at(step, 0)));  // the full layer compares nothing
      const float r = m.similarity_at(step, 1);
      QCOMPARE(std::isnan(r), step == 0);
      bool retrieved = false;
      for (const auto& e : m.retrievals) {
        QCOMPARE(e.layer, int64_t{1});
        QCOMPARE(e.rows, int64_t{32});  // the prompt's pool holds more than the budget
        QVERIFY(e.units >= m.kv_heads);
        retrieved = retrieved || e.step == step;
      }
      QCOMPARE(retrieved, step == 0 || r < 0.58f);
      below += step > 0 && r < 0.58f ? 1 : 0;
    }
    QCOMPARE(static_cast<int64_t>(m.retrievals.size()), below + 1);
    QVERIFY2(below > 0 && below < m.steps - 1, qPrintable(QString::number(below)));
    QVERIFY2(engram::ui::describe_retrieval_map(m).contains(
                 QStringLiteral("%1 retrievals").arg(m.retrievals.size())),
             qPrintable(engram::ui::describe_retrieval_map(m)));

    QVERIFY(panel.retrievals_button()->isEnabled());
    QVERIFY(!panel.showing_retrievals());
    panel.retrievals_button()->click();
    QVERIFY(panel.showing_retrievals());
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    engram::ui::RetrievalMapView* view = panel.map_view();
    QVERIFY(view->isVisible());
    const auto x_of = [&](double step) {
      return int(64 + (step + 0.5 - view->view_start_step()) /
                          (view->view_end_step() - view->view_start_step()) *
                          (view->width() - 64 - 84));
    };
    const QString hit = view->describe_at(QPoint(x_of(0), 22 + 12 + 5));
    QVERIFY2(hit.contains(QStringLiteral("step 0 · layer 1")), qPrintable(hit));
    QVERIFY2(hit.contains(QStringLiteral("retrieved 32 rows a KV head")), qPrintable(hit));
    const QString full = view->describe_at(QPoint(x_of(3), 22 + 5));
    QVERIFY2(full.contains(QStringLiteral("full layer")), qPrintable(full));
    for (int64_t step = 1; step < m.steps; ++step) {
      const QString tip = view->describe_at(QPoint(x_of(double(step)), 22 + 12 + 5));
      const bool retrieved = view->retrieval_at(step, 1) != nullptr;
      QVERIFY2(tip.contains(retrieved ? QStringLiteral("a semantic boundary")
                                      : QStringLiteral("no retrieval: r_t = ")),
               qPrintable(tip));
    }
    const QString svg = dir_.filePath(QStringLiteral("map.svg"));
    const QString png = dir_.filePath(QStringLiteral("map.png"));
    QVERIFY(panel.export_svg(svg));
    QVERIFY(panel.export_png(png));
    QVERIFY(!QImage(png).isNull());
    QFile f(svg);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QVERIFY(f.readAll().contains("Engram retrieval map"));
    // Back to the timeline.
    panel.retrievals_button()->click();
    QVERIFY(!panel.showing_retrievals());
    QVERIFY(panel.view()->isVisible());
  }

  // Maps arrive from the engine after their request's intervals; a long reply's map draws each
  // pixel column from the share of its steps that retrieved; a map line that does not hold
  // together is refused with its file and line, and the file adds nothing.
  void retrievalMapsLiveLongAndBad() {
    engram::ui::TimelinePanel panel;
    panel.resize(900, 300);
    std::vector<LayerInterval> v = {interval(0, TraceLane::kCompute, 0, 10),
                                    interval(1, TraceLane::kCompute, 12, 20)};
    panel.addIntervals(QVector<LayerInterval>(v.begin(), v.end()));
    QVERIFY(!panel.retrievals_button()->isEnabled());
    RetrievalMap m;
    m.request = 7;
    m.layers = 2;
    m.full_layers = 1;
    m.kv_heads = 2;
    m.budget = 16;
    m.tau = 0.5;
    for (int i = 0; i < 3; ++i)
      m.begin_step();
    m.set_similarity(1, 1, 0.4f);
    m.set_similarity(2, 1, 0.9f);
    m.retrievals = {{0, 1, 16, 5}, {1, 1, 16, 6}};
    panel.addRetrievalMap(m);
    QVERIFY(panel.retrievals_button()->isEnabled());
    const QString line = engram::ui::describe_retrieval_map(m);
    QVERIFY2(line.contains(QStringLiteral("2 retrievals (0.67 a layer and token)")),
             qPrintable(line));
    QVERIFY2(line.contains(QStringLiteral("from 2.8 units a head")), qPrintable(line));
    QVERIFY2(line.contains(QStringLiteral("r_t < τ = 0.50 at 1 of 2 compared steps")),
             qPrintable(line));
    // Each layer its own τ (LouisKV's rate=): the summary counts r_t against the step's own τ.
    RetrievalMap own = m;
    own.tau = -1;
    own.set_threshold(1, 1, 0.3f);   // 0.4 is not below: no boundary
    own.set_threshold(2, 1, 0.95f);  // 0.9 is
    QCOMPARE(own.threshold_at(2, 1), 0.95f);
    const QString own_line = engram::ui::describe_retrieval_map(own);
    QVERIFY2(own_line.contains(QStringLiteral("each layer its own τ: r_t below it at 1 of 2")),
             qPrintable(own_line));
    QCOMPARE(engram::parse_retrieval_map(engram::to_json_line(own)).threshold_at(1, 1), 0.3f);

    // 5,000 steps: layer 1 retrieves at every one of the first 2,500 and never after.
    RetrievalMap big = m;
    big.steps = 0;
    big.similarity.clear();
    big.retrievals.clear();
    for (int64_t s = 0; s < 5000; ++s) {
      big.begin_step();
      big.set_similarity(s, 1, s < 2500 ? 0.2f : 0.95f);
      if (s < 2500) big.retrievals.push_back({s, 1, 16, 4});
    }
    engram::ui::RetrievalMapView view;
    view.set_map(std::make_shared<const RetrievalMap>(big));
    QImage image(900, 200, QImage::Format_ARGB32);
    {
      QPainter p(&image);
      view.render_to(p, image.size());
    }
    const int plot = 900 - 64 - 84, row1 = 22 + 12 + 5;
    QCOMPARE(QColor(image.pixel(64 + plot / 4, row1)), QColor(0xc4, 0x3c, 0x9a));
    QVERIFY(QColor(image.pixel(64 + 3 * plot / 4, row1)) != QColor(0xc4, 0x3c, 0x9a));

    const QString bad = dir_.filePath(QStringLiteral("bad-map.jsonl"));
    {
      RetrievalMap wrong = m;
      wrong.retrievals.push_back({9, 1, 16, 4});  // step 9 of a 3-step map
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Text));
      f.write(
          QByteArray::fromStdString(engram::to_json_line(interval(0, TraceLane::kCompute, 0, 1))));
      f.write("\n");
      f.write(QByteArray::fromStdString(engram::to_json_line(wrong)));
      f.write("\n");
    }
    const size_t before = panel.model().requests().size();
    QString error;
    QVERIFY(!panel.open_trace_file(bad, &error));
    QVERIFY2(error.contains(QStringLiteral("bad-map.jsonl:2")) &&
                 error.contains(QStringLiteral("outside the map")),
             qPrintable(error));
    QCOMPARE(panel.model().requests().size(), before);
    // A step count whose product with the layers wraps around to the values given (2^62 x 4 =
    // 2^64: none) is refused, not drawn for ever.
    RetrievalMap empty = m;
    empty.layers = 4;
    empty.steps = 0;
    empty.similarity.clear();
    empty.retrievals.clear();
    std::string wrapped = engram::to_json_line(empty);
    wrapped.replace(wrapped.find("\"steps\":0"), 9, "\"steps\":4611686018427387904");
    QVERIFY_EXCEPTION_THROWN(engram::parse_retrieval_map(wrapped), std::invalid_argument);
    // Thresholds that do not cover the similarities are refused too.
    RetrievalMap short_own = m;
    short_own.set_threshold(0, 1, 0.5f);
    std::string cut = engram::to_json_line(short_own);
    cut.replace(cut.find("\"threshold\":[null,0.5,"), 22, "\"threshold\":[");
    QVERIFY_EXCEPTION_THROWN(engram::parse_retrieval_map(cut), std::invalid_argument);
  }
};

QTEST_MAIN(UiTimelineTest)
#include "test_ui_timeline.moc"
