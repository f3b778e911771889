// The importance-propagation panel (ui/importance_panel.h), offscreen, on a trace this test writes
// (Figure 6's door -> key -> table chain): the nodes filled are the recompute set of the layer
// chosen, the others greyed; the edges are the strongest unit attention; playing the layer's
// propagation rounds highlights each round's relevant set with its scores and ends on the next
// layer's set; the strip gives each unit's group per step; the picture is drawn. With
// ENGRAM_IMPORTANCE_SCREENSHOT=FILE it saves the panel on the engram-tiny fixture trace there.
#include <QComboBox>
#include <QImage>
#include <QPainter>
#include <QPushButton>
#include <QSlider>
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <set>

#include "core/policies/importance_propagation.h"
#include "core/policies/recompute_trace.h"
#include "ui/importance_panel.h"

using namespace engram;
using engram::ui::ImportancePanel;

namespace {

UnitAttention door_key_table() {
  UnitAttention a;
  a.units = {0, 1, 2, 3, 4};
  a.from_query = {0.05, 0.10, 0.50, 0.20, 0.15};
  a.from_unit = {
      {0.90, 0.00, 0.00, 0.00, 0.00},  // table
      {0.70, 0.25, 0.00, 0.00, 0.00},  // key -> table
      {0.05, 0.60, 0.30, 0.00, 0.00},  // door -> key
      {0.02, 0.02, 0.05, 0.80, 0.00},  // sofa
      {0.02, 0.02, 0.05, 0.02, 0.85},  // lamp
  };
  return a;
}

// Three steps of BOS | table key door sofa lamp | query: layer 0 every unit, layer 1 the chain
// propagation found, layer 2 the table and the door. The key settles (static) at step 1; step 2
// assembles another lamp.
RecomputeTrace trace() {
  const AssembledLayout layout = assemble_layout(1, {2, 3, 2, 1, 2}, 2);
  const ImportanceResult keep = propagate_importance(door_key_table(), 3);
  RecomputePlan plan;
  std::vector<int64_t> all = layout.all_unit_rows();
  std::vector<int64_t> chain = layout.rows_of_units(keep.selected);
  for (int64_t q : layout.query_rows()) {
    all.push_back(q);
    chain.push_back(q);
  }
  plan.rows = {all, chain, {1, 2, 6, 7, 11, 12}};
  plan.hops = {keep.hops, {}};
  plan.attention = {door_key_table(), {}};
  RecomputeTrace t;
  t.model = "hand-made";
  for (int64_t s = 0; s < 3; ++s) {
    std::vector<TraceUnitInfo> units = {
        {"table_1", "object", "a table in the kitchen", "static", 2},
        {"key_2", "object", "a key on the table", s == 0 ? "dynamic" : "static", 1},
        {"door_3", "object", "the front door", "dynamic", 1},
        {"sofa_4", "object", "a sofa", "segment", 1},
        {s == 2 ? "lamp_6" : "lamp_5", "object", "a lamp", "segment", 1}};
    TraceStep step = make_trace_step(layout, plan, units);
    step.step = 5 * s;
    step.method = "keep";
    step.spec = "keep";
    t.steps.push_back(std::move(step));
  }
  return t;
}

std::set<int64_t> as_set(const std::vector<int64_t>& v) {
  return {v.begin(), v.end()};
}

// The colour at a point inside node `unit`, above its number.
QColor node_fill(const ImportancePanel& panel, int64_t unit) {
  QImage image(640, 520, QImage::Format_ARGB32);
  QPainter p(&image);
  panel.graph()->render_to(p, image.size());
  p.end();
  const QPointF c = panel.graph()->node_center(unit, image.size());
  return image.pixelColor(QPoint(int(c.x()), int(c.y()) - 10));
}

}  // namespace

class UiImportanceTest : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString path_;

 private Q_SLOTS:
  void initTestCase() {
    path_ = dir_.filePath(QStringLiteral("trace.json"));
    write_recompute_trace(path_.toStdString(), trace());
  }

  void opensTheFileAndRefusesABadOne() {
    ImportancePanel panel;
    QCOMPARE(panel.step_count(), 0);
    QVERIFY(panel.filled_units().empty());
    QVERIFY(!panel.play_button()->isEnabled());
    QString error;
    QVERIFY(panel.open_trace_file(path_, &error));
    QCOMPARE(panel.step_count(), 3);
    QCOMPARE(panel.step_list()->count(), 3);
    QCOMPARE(panel.layer_count(), 3);
    QCOMPARE(panel.layer_slider()->maximum(), 2);

    const QString bad = dir_.filePath(QStringLiteral("bad.json"));
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"format\": \"engram-recompute-trace\", \"version\": 1, \"steps\": [");
    f.close();
    QVERIFY(!panel.open_trace_file(bad, &error));
    QVERIFY2(error.contains(QStringLiteral("bad.json: not JSON")), qPrintable(error));
    QCOMPARE(panel.step_count(), 3);  // the trace shown stays
  }

  void filledNodesAreTheLayersRecomputeSet() {
    ImportancePanel panel;
    QVERIFY(panel.open_trace_file(path_));
    QCOMPARE(panel.filled_units(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    QVERIFY(panel.dropped_units().empty());
    QVERIFY(panel.query_filled());
    panel.layer_slider()->setValue(1);  // as a drag does
    QCOMPARE(panel.layer_index(), 1);
    QCOMPARE(panel.filled_units(), (std::vector<int64_t>{0, 1, 2}));
    QCOMPARE(panel.dropped_units(), (std::vector<int64_t>{3, 4}));
    panel.set_layer(2);
    QCOMPARE(panel.layer_slider()->value(), 2);
    QCOMPARE(panel.filled_units(), (std::vector<int64_t>{0, 2}));
    QCOMPARE(panel.dropped_units(), (std::vector<int64_t>{1, 3, 4}));
    QCOMPARE(panel.hop_count(), 0);  // the last layer chooses nothing
    QVERIFY(!panel.play_button()->isEnabled());
    QVERIFY(panel.edges().empty());
    panel.set_layer(99);
    QCOMPARE(panel.layer_index(), 2);

    // Drawn so: the filled nodes in their group's colour, the dropped ones grey.
    panel.resize(700, 700);
    panel.set_layer(1);
    QCOMPARE(node_fill(panel, 0), QColor(0x2f, 0x6f, 0xd6));  // static, recomputed
    QCOMPARE(node_fill(panel, 2), QColor(0xe6, 0x8a, 0x00));  // dynamic, recomputed
    QCOMPARE(node_fill(panel, 4), QColor(0xdc, 0xdc, 0xdc));  // dropped
    panel.set_layer(0);
    QCOMPARE(node_fill(panel, 4), QColor(0x2e, 0x9d, 0x5b));  // a segment, recomputed
  }

  void edgesAreTheStrongestAttention() {
    ImportancePanel panel;
    QVERIFY(panel.open_trace_file(path_));
    const auto edges = panel.edges();
    // Above a tenth of the strongest (key -> table 0.70; self-attention left out): the query's
    // 0.50, 0.20, 0.15, 0.10 and door -> key 0.60.
    QCOMPARE(edges.size(), size_t(6));
    QCOMPARE(edges[0].from, int64_t(1));
    QCOMPARE(edges[0].to, int64_t(0));
    QCOMPARE(edges[0].mass, 0.70);
    QCOMPARE(edges[1].from, int64_t(2));
    QCOMPARE(edges[1].to, int64_t(1));
    QCOMPARE(edges[2].from, int64_t(-1));  // the query
    QCOMPARE(edges[2].to, int64_t(2));
    for (size_t i = 1; i < edges.size(); ++i)
      QVERIFY(edges[i].mass <= edges[i - 1].mass && edges[i].mass >= 0.07);
  }

  void playingAdvancesTheRounds() {
    ImportancePanel panel;
    QVERIFY(panel.open_trace_file(path_));
    QCOMPARE(panel.hop_count(), 4);  // init, key found, table found, stable
    QCOMPARE(panel.hop(), -1);
    QVERIFY(panel.highlighted_units().empty());
    QSignalSpy shown(&panel, &ImportancePanel::shown);
    panel.play();
    QVERIFY(panel.playing());
    QCOMPARE(panel.hop(), 0);
    // One hop from the query: door, sofa, lamp, scored by the query's attention.
    QCOMPARE(as_set(panel.highlighted_units()), (std::set<int64_t>{2, 3, 4}));
    QCOMPARE(panel.scores().at(2), 0.50);
    QCOMPARE(panel.scores().size(), size_t(5));
    panel.nextHop();
    QCOMPARE(panel.hop(), 1);
    QCOMPARE(as_set(panel.highlighted_units()), (std::set<int64_t>{1, 2, 3}));  // the key
    QVERIFY(panel.playing());
    panel.nextHop();
    panel.nextHop();
    QCOMPARE(panel.hop(), 3);
    QVERIFY(!panel.playing());  // stops at the last round
    panel.nextHop();
    QCOMPARE(panel.hop(), 3);
    // The last round's relevant set is the next layer's recompute set.
    const std::set<int64_t> chosen = as_set(panel.highlighted_units());
    QVERIFY(shown.count() >= 4);
    panel.set_layer(1);
    QCOMPARE(panel.hop(), -1);
    QCOMPARE(as_set(panel.filled_units()), chosen);

    // The timer drives the same rounds.
    panel.set_layer(0);
    panel.setHopInterval(1);
    panel.play_button()->click();
    QVERIFY(panel.playing());
    QTRY_VERIFY_WITH_TIMEOUT(!panel.playing(), 5000);
    QCOMPARE(panel.hop(), 3);
    // Play again starts over.
    panel.play();
    QCOMPARE(panel.hop(), 0);
    panel.pause();
    QVERIFY(!panel.playing());
  }

  void stepsAndTheStateStrip() {
    ImportancePanel panel;
    QVERIFY(panel.open_trace_file(path_));
    panel.set_layer(1);
    panel.step_list()->setCurrentIndex(1);
    QCOMPARE(panel.step_index(), 1);
    QCOMPARE(panel.step()->step, int64_t(5));
    QCOMPARE(panel.layer_index(), 1);  // the layer stays
    QCOMPARE(panel.strip_keys().size(), size_t(6));
    QCOMPARE(panel.unit_state(0, "key_2"), std::string("dynamic"));
    QCOMPARE(panel.unit_state(1, "key_2"), std::string("static"));
    QCOMPARE(panel.unit_state(0, "table_1"), std::string("static"));
    QCOMPARE(panel.unit_state(2, "lamp_5"), std::string());
    QCOMPARE(panel.unit_state(2, "lamp_6"), std::string("segment"));
    QCOMPARE(panel.unit_state(7, "key_2"), std::string());
    panel.set_step(2);
    QCOMPARE(panel.step_list()->currentIndex(), 2);
    QVERIFY(panel.summary_text().contains(QStringLiteral("Step 10")));
  }

  void rendersAPicture() {
    ImportancePanel panel;
    QVERIFY(panel.open_trace_file(path_));
    panel.resize(760, 720);
    panel.play();
    panel.nextHop();
    const QImage image = panel.grab().toImage();
    QVERIFY(!image.isNull());
    QCOMPARE(image.size(), QSize(760, 720));
    std::set<QRgb> colors;
    for (int y = 0; y < image.height(); y += 7)
      for (int x = 0; x < image.width(); x += 7)
        colors.insert(image.pixel(x, y));
    QVERIFY(colors.size() > 20);
    const QString png = dir_.filePath(QStringLiteral("graph.png"));
    QVERIFY(panel.export_png(png));
    QVERIFY(!QImage(png).isNull());
  }

  // The trace engram-cli wrote on engram-tiny opens; optionally saved as a screenshot.
  void opensTheEngramTinyFixture() {
    const QString fixture = QStringLiteral(ENGRAM_TEST_DATA "/keep-trace/engram-tiny.json");
    if (!QFile::exists(fixture)) QSKIP("no fixture trace");
    ImportancePanel panel;
    QString error;
    QVERIFY2(panel.open_trace_file(fixture, &error), qPrintable(error));
    QVERIFY(panel.step_count() > 0);
    panel.set_layer(1);
    QVERIFY(panel.hop_count() > 0);
    QVERIFY(!panel.edges().empty());
    panel.play();
    while (panel.playing())
      panel.nextHop();
    panel.set_layer(2);
    const std::set<int64_t> next = as_set(panel.filled_units());
    panel.set_layer(1);
    panel.play();
    while (panel.playing())
      panel.nextHop();
    QCOMPARE(as_set(panel.highlighted_units()), next);
    const QString shot = qEnvironmentVariable("ENGRAM_IMPORTANCE_SCREENSHOT");
    if (!shot.isEmpty()) {
      panel.set_step(std::min(3, panel.step_count() - 1));
      panel.set_layer(0);
      panel.play();
      panel.nextHop();
      panel.pause();
      panel.resize(900, 820);
      QVERIFY(panel.grab().save(shot));
    }
  }
};

QTEST_MAIN(UiImportanceTest)
#include "test_ui_importance.moc"
