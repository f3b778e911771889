// The layer timeline's model: built from the file `engram-cli --trace` writes, it holds every
// interval of each request, one row per layer, and idle gaps that are exactly the parts of the
// request where its lane ran nothing; exports write PNG and SVG.
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>

#include "ui/timeline_model.h"
#include "ui/timeline_panel.h"

using engram::LayerInterval;
using engram::TraceLane;
using engram::ui::RequestTimeline;
using engram::ui::TimelineModel;

namespace {

LayerInterval interval(int64_t layer, TraceLane lane, double start, double end) {
  LayerInterval i;
  i.request = 7;
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
};

QTEST_MAIN(UiTimelineTest)
#include "test_ui_timeline.moc"
