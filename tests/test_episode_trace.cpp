// The episode trace the episodes panel reads (core/policies/episode_trace.h): a step built from a
// hand-made clustering has the right members, medoids and cosines; a trace survives a write and a
// read unchanged, floats included; damaged or inconsistent files are refused with an error naming
// the file and the field; the 2D projection of points on a line is that line, of a plane its two
// axes, the same every time; the fixture engram-cli wrote (tests/data/episode-trace/) reads and
// keeps the router's contract (the routed episode has the highest cosine).
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <stdexcept>

#include "core/policies/episode_trace.h"

using namespace engram;

namespace {

// Three episodes over six windows in 3D: two near x, two near y, two near z.
std::vector<Embedding> window_embeddings() {
  std::vector<Embedding> v = {{1, 0.1f, 0}, {1, 0, 0.1f}, {0.1f, 1, 0},
                              {0, 1, 0.2f}, {0.1f, 0, 1}, {0, 0.2f, 1}};
  for (Embedding& e : v)
    normalize(e);
  return v;
}

EpisodeTraceStep hand_made_step(int32_t routed = 1) {
  const std::vector<UtteranceWindow> windows = utterance_windows(2, 24, 4);  // [2,6) .. [22,24)
  std::vector<std::string> texts;
  for (size_t w = 0; w < windows.size(); ++w)
    texts.push_back("User said, \"window " + std::to_string(w) + "\"\nAssistant said, \"ok\"\n");
  texts[5] = std::string(90, 'x');
  EpisodeClustering c;
  c.assignment = {0, 0, 1, 1, 2, 2};
  c.centroids = {{1, 0.05f, 0.05f}, {0.05f, 1, 0.1f}, {0.05f, 0.1f, 1}};
  for (Embedding& e : c.centroids)
    normalize(e);
  c.medoids = {0, 3, 4};
  Embedding query = {0.2f, 1, 0};
  normalize(query);
  EpisodeTraceStep s = make_episode_trace_step(windows, texts, window_embeddings(), c,
                                               "Where did I park\tthe car?", query, routed);
  s.turn = 3;
  s.spec = "epicache:episodes=3";
  s.budget = 512;
  s.layers = 4;
  s.episodes[0].cache_tokens = 512;
  s.episodes[1].cache_tokens = 480;
  s.episodes[1].fed_tokens = 37;
  s.episodes[1].built = true;
  s.episodes[2].layer_budgets = {700, 600, 400, 348};
  return s;
}

EpisodeTrace hand_made_trace() {
  EpisodeTrace t;
  t.model = "hand-made";
  t.steps.push_back(hand_made_step(1));
  EpisodeTraceStep next = hand_made_step(2);
  next.turn = 4;
  next.query.created = true;
  next.query.tau = 0.25;
  t.steps.push_back(next);
  return t;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// The read error for `trace` after `damage` was done to its JSON.
template <class Damage>
QString error_after(const std::filesystem::path& path, Damage damage) {
  nlohmann::json j = hand_made_trace();
  damage(j);
  write_text(path, j.dump());
  try {
    read_episode_trace(path);
  } catch (const std::runtime_error& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

double length(const std::vector<double>& v) {
  return std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
}

}  // namespace

class EpisodeTraceTest : public QObject {
  Q_OBJECT

  std::filesystem::path dir_;

 private Q_SLOTS:
  void initTestCase() {
    dir_ = std::filesystem::temp_directory_path() /
           ("engram-episode-trace-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::create_directories(dir_);
  }
  void cleanupTestCase() { std::filesystem::remove_all(dir_); }

  void aStepHasTheClusteringAndTheRouting() {
    const EpisodeTraceStep s = hand_made_step();
    QCOMPARE(s.windows.size(), size_t(6));
    QCOMPARE(s.windows[0].begin, int64_t(2));
    QCOMPARE(s.windows[0].end, int64_t(6));
    QCOMPARE(s.windows[5].begin, int64_t(22));
    QCOMPARE(s.windows[5].end, int64_t(24));
    QVERIFY(s.windows[0].label.find('\n') == std::string::npos);  // one line
    QVERIFY(s.windows[5].label.size() < 90);                      // cut
    QCOMPARE(s.query.label, std::string("Where did I park the car?"));
    QCOMPARE(s.episodes.size(), size_t(3));
    QCOMPARE(s.episodes[0].members, (std::vector<int64_t>{0, 1}));
    QCOMPARE(s.episodes[1].members, (std::vector<int64_t>{2, 3}));
    QCOMPARE(s.episodes[2].members, (std::vector<int64_t>{4, 5}));
    QCOMPARE(s.episodes[1].medoid, int64_t(3));
    QCOMPARE(s.query.episode, int64_t(1));
    QCOMPARE(s.query.cosines.size(), size_t(3));
    for (size_t e = 0; e < 3; ++e)
      QCOMPARE(s.query.cosines[e], cosine(s.episodes[e].centroid, s.query.embedding));
    QVERIFY(s.query.cosines[1] > s.query.cosines[0] && s.query.cosines[0] > s.query.cosines[2]);
    QCOMPARE(s.query.tau, kNoNewEpisodes);
    QVERIFY(!s.query.created);

    EpisodeClustering c;
    c.assignment = {0};
    c.centroids = {{1, 0}};
    c.medoids = {0};
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             make_episode_trace_step({{0, 4}}, {"a"}, {{1, 0}}, c, "q", {1, 0}, 1));
    QVERIFY_THROWS_EXCEPTION(
        std::invalid_argument,
        make_episode_trace_step({{0, 4}, {4, 8}}, {"a", "b"}, {{1, 0}}, c, "q", {1, 0}, 0));
  }

  void aTraceSurvivesWriteAndRead() {
    const EpisodeTrace t = hand_made_trace();
    const auto path = dir_ / "trace.json";
    write_episode_trace(path, t);
    QVERIFY(!std::filesystem::exists(
        dir_ / ("trace.json.tmp." + std::to_string(QCoreApplication::applicationPid()))));
    const EpisodeTrace r = read_episode_trace(path);
    QCOMPARE(r.model, t.model);
    QCOMPARE(r.steps.size(), t.steps.size());
    for (size_t s = 0; s < t.steps.size(); ++s) {
      const EpisodeTraceStep &a = t.steps[s], &b = r.steps[s];
      QCOMPARE(b.turn, a.turn);
      QCOMPARE(b.spec, a.spec);
      QCOMPARE(b.budget, a.budget);
      QCOMPARE(b.layers, a.layers);
      QCOMPARE(b.windows.size(), a.windows.size());
      for (size_t w = 0; w < a.windows.size(); ++w) {
        QCOMPARE(b.windows[w].index, a.windows[w].index);
        QCOMPARE(b.windows[w].begin, a.windows[w].begin);
        QCOMPARE(b.windows[w].end, a.windows[w].end);
        QCOMPARE(b.windows[w].label, a.windows[w].label);
        QCOMPARE(b.windows[w].embedding, a.windows[w].embedding);  // the same floats
      }
      QCOMPARE(b.episodes.size(), a.episodes.size());
      for (size_t e = 0; e < a.episodes.size(); ++e) {
        QCOMPARE(b.episodes[e].index, a.episodes[e].index);
        QCOMPARE(b.episodes[e].centroid, a.episodes[e].centroid);
        QCOMPARE(b.episodes[e].medoid, a.episodes[e].medoid);
        QCOMPARE(b.episodes[e].members, a.episodes[e].members);
        QCOMPARE(b.episodes[e].cache_tokens, a.episodes[e].cache_tokens);
        QCOMPARE(b.episodes[e].fed_tokens, a.episodes[e].fed_tokens);
        QCOMPARE(b.episodes[e].built, a.episodes[e].built);
        QCOMPARE(b.episodes[e].layer_budgets, a.episodes[e].layer_budgets);
      }
      QCOMPARE(b.query.label, a.query.label);
      QCOMPARE(b.query.embedding, a.query.embedding);
      QCOMPARE(b.query.episode, a.query.episode);
      QCOMPARE(b.query.cosines, a.query.cosines);
      QCOMPARE(b.query.created, a.query.created);
      QCOMPARE(b.query.tau, a.query.tau);
    }
    // Floats are written in their shortest form, not as 17-digit doubles.
    std::ifstream in(path);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    QVERIFY(bytes.find("0.99503719") != std::string::npos ||
            bytes.find("0.9950372") != std::string::npos);
    QVERIFY(bytes.find("0.99503719806") == std::string::npos);
    // Written again, the same bytes.
    write_episode_trace(dir_ / "again.json", r);
    std::ifstream again(dir_ / "again.json");
    QCOMPARE(std::string((std::istreambuf_iterator<char>(again)), {}), bytes);
  }

  void damagedFilesAreRefusedNamingTheField() {
    const auto path = dir_ / "bad.json";
    write_text(path, R"({"format": "engram-episode-trace", "version": 1, "steps": [)");
    try {
      read_episode_trace(path);
      QFAIL("a truncated file was read");
    } catch (const std::runtime_error& e) {
      const QString what = e.what();
      QVERIFY2(what.contains(QStringLiteral("episode trace ")) &&
                   what.contains(QStringLiteral("bad.json: not JSON (byte")),
               qPrintable(what));
    }
    try {
      read_episode_trace(dir_ / "absent.json");
      QFAIL("an absent file was read");
    } catch (const std::runtime_error& e) {
      QVERIFY2(QString(e.what()).contains(QStringLiteral("absent.json: cannot be opened")),
               e.what());
    }
    auto expect = [&](const QString& error, const char* part) {
      QVERIFY2(error.contains(QStringLiteral("bad.json: ")) && error.contains(QLatin1String(part)),
               qPrintable(error + QStringLiteral(" lacks ") + QLatin1String(part)));
    };
    using nlohmann::json;
    expect(error_after(path, [](json& j) { j["format"] = "engram-recompute-trace"; }),
           "format: expected \"engram-episode-trace\", got \"engram-recompute-trace\"");
    expect(error_after(path, [](json& j) { j["version"] = 9; }), "version: 9 is not supported");
    expect(error_after(path, [](json& j) { j["steps"][1]["episodes"][2].erase("medoid"); }),
           "steps[1].episodes[2].medoid: missing");
    expect(error_after(path, [](json& j) { j["steps"][0]["windows"][3]["embedding"][1] = "x"; }),
           "steps[0].windows[3].embedding: expected an array of numbers");
    expect(error_after(path, [](json& j) { j["steps"][0]["query"]["created"] = 1; }),
           "steps[0].query.created: expected true or false");
    expect(error_after(path, [](json& j) { j["steps"][0]["episodes"][1]["medoid"] = 6; }),
           "steps[0]: episodes[1].medoid 6 is not one of the 6 windows");
    expect(
        error_after(path, [](json& j) { j["steps"][1]["episodes"][0]["members"].push_back(-1); }),
        "steps[1]: episodes[0].members -1 is not one of the 6 windows");
    expect(error_after(path, [](json& j) { j["steps"][0]["query"]["cosines"].erase(0); }),
           "steps[0]: query.cosines has 2 entries, expected one per episode (3)");
    expect(error_after(path, [](json& j) { j["steps"][0]["query"]["episode"] = 3; }),
           "steps[0]: query.episode 3 is not one of the 3 episodes");
    expect(error_after(path, [](json& j) { j["steps"][0]["episodes"][2]["layer_budgets"] = {1}; }),
           "steps[0]: episodes[2].layer_budgets has 1 entries, expected none (uniform) or one "
           "per layer (4)");
    expect(error_after(path, [](json& j) { j["steps"][0]["episodes"][1]["centroid"].erase(0); }),
           "steps[0]: episodes[1].centroid has 2 dimensions, expected 3");
    expect(error_after(path, [](json& j) { j["steps"][0]["windows"][2]["index"] = 7; }),
           "steps[0]: windows[2].index is 7, expected its position 2");
    // What a chat's router writes is not damage: an episode created from a query has no medoid
    // and may have no cosine yet (the router scores before it creates).
    QCOMPARE(error_after(path,
                         [](json& j) {
                           j["steps"][1]["episodes"][2]["medoid"] = -1;
                           j["steps"][1]["query"]["cosines"].erase(2);
                         }),
             QString());
    expect(error_after(path,
                       [](json& j) {
                         j["steps"][1]["query"]["cosines"].erase(0);
                         j["steps"][1]["query"]["cosines"].erase(0);
                       }),
           "steps[1]: query.cosines has 1 entries, expected one per episode (3)");
  }

  void pointsOnALineProjectOntoThatLine() {
    std::vector<double> u = {1, -2, 0, 3, 1};
    const double n = length(u);
    for (double& x : u)
      x /= n;
    const std::vector<double> ts = {-2.0, -0.5, 0.25, 1.0, 3.5, 4.0};
    std::vector<Embedding> points;
    for (double t : ts) {
      Embedding p(5);
      for (size_t i = 0; i < 5; ++i)
        p[i] = static_cast<float>(0.3 + t * u[i]);
      points.push_back(p);
    }
    const PlaneProjection plane = project_2d(points);
    // The line's direction, its largest coordinate (3) positive.
    for (size_t i = 0; i < 5; ++i)
      QVERIFY2(std::abs(plane.x_axis[i] - u[i]) < 1e-5, qPrintable(QString::number(i)));
    QVERIFY(plane.x_variance > 1);
    QVERIFY(plane.y_variance < 1e-9);
    const double mean_t = std::accumulate(ts.begin(), ts.end(), 0.0) / double(ts.size());
    for (size_t k = 0; k < ts.size(); ++k) {
      const PlanePoint p = plane.apply(points[k]);
      QVERIFY2(std::abs(p.x - (ts[k] - mean_t)) < 1e-5, qPrintable(QString::number(p.x)));
      QVERIFY(std::abs(p.y) < 1e-5);
    }
    // The opposite direction gives the same axis: the sign is the data's, not the start's.
    std::vector<Embedding> flipped;
    for (auto it = points.rbegin(); it != points.rend(); ++it)
      flipped.push_back(*it);
    const PlaneProjection again = project_2d(flipped);
    for (size_t i = 0; i < 5; ++i)
      QVERIFY(std::abs(again.x_axis[i] - plane.x_axis[i]) < 1e-6);
  }

  void aPlaneGivesItsTwoAxesDeterministically() {
    // A grid spread 3 along a, 1 along b (orthogonal, uncorrelated), nothing along the 4th axis.
    const std::vector<double> a = {0.6, 0.8, 0, 0}, b = {0, 0, -1, 0};
    std::vector<Embedding> points;
    for (int i = -3; i <= 3; ++i)
      for (int k = -1; k <= 1; ++k) {
        const double s = i, t = 0.5 * k;
        points.push_back({float(s * a[0] + t * b[0]), float(s * a[1] + t * b[1]),
                          float(s * a[2] + t * b[2]), 0.0f});
      }
    const PlaneProjection p = project_2d(points);
    QVERIFY(std::abs(length(p.x_axis) - 1) < 1e-9);
    QVERIFY(std::abs(length(p.y_axis) - 1) < 1e-9);
    QVERIFY(std::abs(std::inner_product(p.x_axis.begin(), p.x_axis.end(), p.y_axis.begin(), 0.0)) <
            1e-9);
    for (size_t i = 0; i < 4; ++i) {
      QVERIFY2(std::abs(p.x_axis[i] - a[i]) < 1e-3, qPrintable(QString::number(p.x_axis[i])));
      QVERIFY2(std::abs(p.y_axis[i] - (-b[i])) < 1e-3,  // the sign: the largest coordinate > 0
               qPrintable(QString::number(p.y_axis[i])));
    }
    QVERIFY(p.x_variance > p.y_variance && p.y_variance > 0.1);
    const PlaneProjection q = project_2d(points);
    QCOMPARE(q.x_axis, p.x_axis);  // bit for bit
    QCOMPARE(q.y_axis, p.y_axis);
    QCOMPARE(q.mean, p.mean);

    // Degenerate sets: none, one point, every point the same.
    QVERIFY(project_2d({}).mean.empty());
    const PlanePoint none = project_2d({}).apply({1, 2});
    QCOMPARE(none.x, 0.0);
    const PlaneProjection same = project_2d({{1, 2}, {1, 2}, {1, 2}});
    QCOMPARE(same.x_variance, 0.0);
    QCOMPARE(same.apply({1, 2}).x, 0.0);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, project_2d({{1, 2}, {1, 2, 3}}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, p.apply({1, 2}));
  }

  void aStepProjectsOnItsWindowsPlane() {
    const EpisodeTraceStep s = hand_made_step();
    const EpisodeStepPlane plane = project_step(s);
    QCOMPARE(plane.windows.size(), size_t(6));
    QCOMPARE(plane.centroids.size(), size_t(3));
    std::vector<Embedding> windows;
    for (const auto& w : s.windows)
      windows.push_back(w.embedding);
    const PlaneProjection fitted = project_2d(windows);
    QCOMPARE(plane.projection.x_axis, fitted.x_axis);
    for (size_t e = 0; e < 3; ++e) {
      const PlanePoint c = fitted.apply(s.episodes[e].centroid);
      QCOMPARE(plane.centroids[e].x, c.x);
      QCOMPARE(plane.centroids[e].y, c.y);
    }
    // Each centroid lies nearer its own members than the others' on the plane too (three
    // well-separated groups keep their separation in two dimensions).
    for (size_t w = 0; w < 6; ++w) {
      const size_t own = w / 2;
      auto d = [&](size_t e) {
        return std::hypot(plane.windows[w].x - plane.centroids[e].x,
                          plane.windows[w].y - plane.centroids[e].y);
      };
      for (size_t e = 0; e < 3; ++e)
        if (e != own) QVERIFY(d(own) < d(e));
    }
    const PlanePoint q = fitted.apply(s.query.embedding);
    QCOMPARE(plane.query.x, q.x);
  }

  // The trace engram-cli eval conversation --episodes-trace wrote on engram-tiny.
  void theEngramTinyFixtureKeepsTheRoutersContract() {
    const std::filesystem::path fixture = ENGRAM_TEST_DATA "/episode-trace/trace.json";
    if (!std::filesystem::exists(fixture)) QSKIP("no fixture trace");
    const EpisodeTrace t = read_episode_trace(fixture);
    QVERIFY(t.model.find("engram-tiny") != std::string::npos);
    QVERIFY(t.steps.size() >= 2);
    for (const EpisodeTraceStep& s : t.steps) {
      QVERIFY(s.spec.rfind("epicache", 0) == 0);
      QVERIFY(s.layers > 0 && s.budget > 0);
      QVERIFY(!s.windows.empty() && !s.episodes.empty());
      // The members partition the windows; the medoid is a member.
      std::set<int64_t> seen;
      for (const EpisodeTraceEpisode& e : s.episodes) {
        QVERIFY(std::find(e.members.begin(), e.members.end(), e.medoid) != e.members.end());
        for (int64_t m : e.members)
          QVERIFY(seen.insert(m).second);
        QVERIFY(e.cache_tokens > 0 && e.cache_tokens <= s.budget);
      }
      QCOMPARE(seen.size(), s.windows.size());
      // Eq. 7: the routed episode has the highest cosine, and the cosines are the centroids'.
      const auto best = std::max_element(s.query.cosines.begin(), s.query.cosines.end());
      QCOMPARE(s.query.episode, int64_t(best - s.query.cosines.begin()));
      for (size_t e = 0; e < s.episodes.size(); ++e)
        QVERIFY(std::abs(s.query.cosines[e] - cosine(s.episodes[e].centroid, s.query.embedding)) <
                1e-6);
      QVERIFY(!s.query.created);
    }
  }
};

QTEST_APPLESS_MAIN(EpisodeTraceTest)
#include "test_episode_trace.moc"
