#include "core/policies/episode_trace.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/policies/recompute_trace.h"
#include "core/policies/trace_json.h"

namespace engram {
namespace {

using nlohmann::json;
using namespace trace_json;

// Power iteration: enough rounds for a picture (the panel projects every step it shows, on the
// UI thread: 300 rounds over 1,000 windows of 1,024 dimensions is ~0.6 GFLOP); the start vector
// is a fixed pseudo-random one (a constant vector can be orthogonal to the axis of structured
// points, e.g. a line along (1, -1)).
constexpr int kPowerIterations = 300;
constexpr double kPowerTolerance = 1e-10;
constexpr double kNoSpread = 1e-12;  // variance below this along an axis: no axis

Embedding floats(const json& object, const char* key, const std::string& where) {
  Embedding out;
  for (double x : numbers(object, key, where))
    out.push_back(static_cast<float>(x));
  return out;
}

// A float as the double of its shortest decimal form, so the file holds "0.12345679" rather
// than the 17 digits of the float's exact binary value; it reads back as the same float.
json floats_json(const Embedding& v) {
  json out = json::array();
  for (float f : v) {
    char buf[32];
    const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
    *end = '\0';
    out.push_back(std::strtod(buf, nullptr));
  }
  return out;
}

EpisodeTraceWindow window_of(const json& j, const std::string& where) {
  EpisodeTraceWindow w;
  w.index = integer(j, "index", where);
  w.begin = integer(j, "begin", where);
  w.end = integer(j, "end", where);
  w.label = text(j, "label", where);
  w.embedding = floats(j, "embedding", where);
  return w;
}

EpisodeTraceEpisode episode_of(const json& j, const std::string& where) {
  EpisodeTraceEpisode e;
  e.index = integer(j, "index", where);
  e.centroid = floats(j, "centroid", where);
  e.medoid = integer(j, "medoid", where);
  e.members = integers(j, "members", where);
  e.cache_tokens = integer(j, "cache_tokens", where);
  e.fed_tokens = integer(j, "fed_tokens", where);
  e.built = boolean(j, "built", where);
  e.layer_budgets = integers(j, "layer_budgets", where);
  return e;
}

EpisodeTraceQuery query_of(const json& j, const std::string& where) {
  EpisodeTraceQuery q;
  q.label = text(j, "label", where);
  q.embedding = floats(j, "embedding", where);
  q.episode = integer(j, "episode", where);
  q.cosines = numbers(j, "cosines", where);
  q.created = boolean(j, "created", where);
  q.tau = number(j, "tau", where);
  return q;
}

EpisodeTraceStep step_of(const json& j, const std::string& where) {
  EpisodeTraceStep s;
  s.turn = integer(j, "turn", where);
  s.spec = text(j, "spec", where);
  s.budget = integer(j, "budget", where);
  s.layers = integer(j, "layers", where);
  const json& windows = array(j, "windows", where);
  for (size_t w = 0; w < windows.size(); ++w)
    s.windows.push_back(window_of(windows[w], where + ".windows[" + std::to_string(w) + "]"));
  const json& episodes = array(j, "episodes", where);
  for (size_t e = 0; e < episodes.size(); ++e)
    s.episodes.push_back(episode_of(episodes[e], where + ".episodes[" + std::to_string(e) + "]"));
  s.query = query_of(field(j, "query", where), where + ".query");
  try {
    validate_episode_trace_step(s);
  } catch (const std::invalid_argument& e) {
    bad(where, e.what());
  }
  return s;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

bool finite(const Embedding& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

// Unit-normalises `v`; false (and zero) when it has no length.
bool unit(std::vector<double>& v) {
  const double n = std::sqrt(dot(v, v));
  if (n < kNoSpread) {
    std::fill(v.begin(), v.end(), 0.0);
    return false;
  }
  for (double& x : v)
    x /= n;
  return true;
}

// The leading eigenvector of XᵀX for the centred rows `x`, orthogonal to `against` (empty: to
// nothing); its variance (the eigenvalue / rows) in `variance`.
std::vector<double> principal_axis(const std::vector<std::vector<double>>& x,
                                   const std::vector<double>& against, double* variance) {
  const size_t dim = x.front().size();
  std::vector<double> v(dim);
  uint64_t state = 0x9e3779b97f4a7c15ULL;  // fixed: the same points give the same axes
  for (double& c : v) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    c = static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53) - 0.5;
  }
  auto deflate = [&](std::vector<double>& u) {
    if (against.empty()) return;
    const double d = dot(u, against);
    for (size_t i = 0; i < dim; ++i)
      u[i] -= d * against[i];
  };
  deflate(v);
  *variance = 0;
  if (!unit(v)) return v;
  std::vector<double> next(dim);
  for (int it = 0; it < kPowerIterations; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (const auto& row : x) {
      const double p = dot(row, v);
      for (size_t i = 0; i < dim; ++i)
        next[i] += p * row[i];
    }
    deflate(next);
    if (!unit(next)) {
      std::fill(v.begin(), v.end(), 0.0);
      return v;
    }
    double change = 0;
    for (size_t i = 0; i < dim; ++i)
      change = std::max(change, std::abs(next[i] - v[i]));
    v.swap(next);
    if (change < kPowerTolerance) break;
  }
  for (const auto& row : x) {
    const double p = dot(row, v);
    *variance += p * p / static_cast<double>(x.size());
  }
  if (*variance < kNoSpread) {
    std::fill(v.begin(), v.end(), 0.0);
    *variance = 0;
    return v;
  }
  // The sign: the largest-magnitude coordinate positive (the first of equals).
  size_t top = 0;
  for (size_t i = 1; i < dim; ++i)
    if (std::abs(v[i]) > std::abs(v[top]) + 1e-12) top = i;
  if (v[top] < 0)
    for (double& c : v)
      c = -c;
  return v;
}

}  // namespace

EpisodeTraceStep make_episode_trace_step(const std::vector<UtteranceWindow>& windows,
                                         const std::vector<std::string>& texts,
                                         const std::vector<Embedding>& embeddings,
                                         const EpisodeClustering& clustering,
                                         const std::string& query_text, const Embedding& query,
                                         int32_t routed) {
  check(texts.size() == windows.size() && embeddings.size() == windows.size() &&
            clustering.assignment.size() == windows.size(),
        "episode trace: " + std::to_string(windows.size()) + " windows but " +
            std::to_string(texts.size()) + " texts, " + std::to_string(embeddings.size()) +
            " embeddings and " + std::to_string(clustering.assignment.size()) + " assignments");
  check(clustering.medoids.size() == clustering.centroids.size(),
        "episode trace: one medoid per centroid expected");
  check(routed >= 0 && routed < clustering.episodes(), "episode trace: routed to episode " +
                                                           std::to_string(routed) + " of " +
                                                           std::to_string(clustering.episodes()));
  EpisodeTraceStep step;
  for (size_t w = 0; w < windows.size(); ++w)
    step.windows.push_back({static_cast<int64_t>(w), static_cast<int64_t>(windows[w].begin),
                            static_cast<int64_t>(windows[w].end), trace_label(texts[w]),
                            embeddings[w]});
  for (int64_t e = 0; e < clustering.episodes(); ++e) {
    EpisodeTraceEpisode episode;
    episode.index = e;
    episode.centroid = clustering.centroids[static_cast<size_t>(e)];
    const size_t medoid = clustering.medoids[static_cast<size_t>(e)];
    episode.medoid = medoid == kNoMedoid ? -1 : static_cast<int64_t>(medoid);
    for (size_t w = 0; w < windows.size(); ++w)
      if (clustering.assignment[w] == e) episode.members.push_back(static_cast<int64_t>(w));
    step.episodes.push_back(std::move(episode));
    step.query.cosines.push_back(cosine(clustering.centroids[static_cast<size_t>(e)], query));
  }
  step.query.label = trace_label(query_text);
  step.query.embedding = query;
  step.query.episode = routed;
  validate_episode_trace_step(step);
  return step;
}

void validate_episode_trace_step(const EpisodeTraceStep& s) {
  const size_t windows = s.windows.size(), episodes = s.episodes.size();
  const size_t dim = !s.windows.empty()    ? s.windows.front().embedding.size()
                     : !s.episodes.empty() ? s.episodes.front().centroid.size()
                                           : s.query.embedding.size();
  auto same_dim = [&](const Embedding& v, const std::string& what) {
    check(v.size() == dim, what + " has " + std::to_string(v.size()) + " dimensions, expected " +
                               std::to_string(dim));
    check(finite(v), what + " is not finite");
  };
  for (size_t w = 0; w < windows; ++w) {
    const EpisodeTraceWindow& win = s.windows[w];
    const std::string at = "windows[" + std::to_string(w) + "]";
    check(win.index == static_cast<int64_t>(w), at + ".index is " + std::to_string(win.index) +
                                                    ", expected its position " + std::to_string(w));
    check(0 <= win.begin && win.begin <= win.end,
          at + ": utterances [" + std::to_string(win.begin) + ", " + std::to_string(win.end) +
              ") are not a range");
    same_dim(win.embedding, at + ".embedding");
  }
  for (size_t e = 0; e < episodes; ++e) {
    const EpisodeTraceEpisode& ep = s.episodes[e];
    const std::string at = "episodes[" + std::to_string(e) + "]";
    check(ep.index == static_cast<int64_t>(e), at + ".index is " + std::to_string(ep.index) +
                                                   ", expected its position " + std::to_string(e));
    same_dim(ep.centroid, at + ".centroid");
    auto window = [&](int64_t w, const std::string& what) {
      check(0 <= w && w < static_cast<int64_t>(windows), at + "." + what + " " + std::to_string(w) +
                                                             " is not one of the " +
                                                             std::to_string(windows) + " windows");
    };
    if (ep.medoid != -1) window(ep.medoid, "medoid");
    for (int64_t m : ep.members)
      window(m, "members");
    check(ep.layer_budgets.empty() || static_cast<int64_t>(ep.layer_budgets.size()) == s.layers,
          at + ".layer_budgets has " + std::to_string(ep.layer_budgets.size()) +
              " entries, expected none (uniform) or one per layer (" + std::to_string(s.layers) +
              ")");
  }
  same_dim(s.query.embedding, "query.embedding");
  check(s.query.episode >= (episodes == 0 ? -1 : 0) &&
            s.query.episode < static_cast<int64_t>(episodes),
        "query.episode " + std::to_string(s.query.episode) + " is not one of the " +
            std::to_string(episodes) + " episodes");
  // A router scores the centroids before it creates an episode: the new one may have none.
  check(s.query.cosines.size() == episodes ||
            (s.query.created && s.query.cosines.size() + 1 == episodes),
        "query.cosines has " + std::to_string(s.query.cosines.size()) +
            " entries, expected one per episode (" + std::to_string(episodes) + ")");
}

void to_json(nlohmann::json& j, const EpisodeTrace& trace) {
  json steps = json::array();
  for (const EpisodeTraceStep& s : trace.steps) {
    json windows = json::array();
    for (const EpisodeTraceWindow& w : s.windows)
      windows.push_back({{"index", w.index},
                         {"begin", w.begin},
                         {"end", w.end},
                         {"label", w.label},
                         {"embedding", floats_json(w.embedding)}});
    json episodes = json::array();
    for (const EpisodeTraceEpisode& e : s.episodes)
      episodes.push_back({{"index", e.index},
                          {"centroid", floats_json(e.centroid)},
                          {"medoid", e.medoid},
                          {"members", e.members},
                          {"cache_tokens", e.cache_tokens},
                          {"fed_tokens", e.fed_tokens},
                          {"built", e.built},
                          {"layer_budgets", e.layer_budgets}});
    const EpisodeTraceQuery& q = s.query;
    steps.push_back({{"turn", s.turn},
                     {"spec", s.spec},
                     {"budget", s.budget},
                     {"layers", s.layers},
                     {"windows", windows},
                     {"episodes", episodes},
                     {"query",
                      {{"label", q.label},
                       {"embedding", floats_json(q.embedding)},
                       {"episode", q.episode},
                       {"cosines", q.cosines},
                       {"created", q.created},
                       {"tau", q.tau}}}});
  }
  j = {{"format", kEpisodeTraceFormat},
       {"version", kEpisodeTraceVersion},
       {"model", trace.model},
       {"steps", steps}};
}

void from_json(const nlohmann::json& j, EpisodeTrace& trace) {
  check_format(j, kEpisodeTraceFormat, kEpisodeTraceVersion);
  EpisodeTrace out;
  out.model = text(j, "model", "(top)");
  const json& steps = array(j, "steps", "(top)");
  for (size_t s = 0; s < steps.size(); ++s)
    out.steps.push_back(step_of(steps[s], "steps[" + std::to_string(s) + "]"));
  trace = std::move(out);
}

void write_episode_trace(const std::filesystem::path& path, const EpisodeTrace& trace) {
  write_json_file(path, json(trace), "episode trace");
}

EpisodeTrace read_episode_trace(const std::filesystem::path& path) {
  return read_json_as<EpisodeTrace>(path, "episode trace");
}

PlanePoint PlaneProjection::apply(const Embedding& v) const {
  if (mean.empty()) return {};
  if (v.size() != mean.size())
    throw std::invalid_argument("plane projection: a vector of " + std::to_string(v.size()) +
                                " dimensions on a plane fitted to " + std::to_string(mean.size()));
  PlanePoint p;
  for (size_t i = 0; i < mean.size(); ++i) {
    const double c = static_cast<double>(v[i]) - mean[i];
    p.x += c * x_axis[i];
    p.y += c * y_axis[i];
  }
  return p;
}

PlaneProjection project_2d(const std::vector<Embedding>& points) {
  PlaneProjection plane;
  if (points.empty()) return plane;
  const size_t dim = points.front().size();
  for (const Embedding& p : points)
    if (p.size() != dim)
      throw std::invalid_argument("project_2d: points of " + std::to_string(dim) + " and " +
                                  std::to_string(p.size()) + " dimensions");
  plane.mean.assign(dim, 0.0);
  for (const Embedding& p : points)
    for (size_t i = 0; i < dim; ++i)
      plane.mean[i] += static_cast<double>(p[i]) / static_cast<double>(points.size());
  std::vector<std::vector<double>> x;
  for (const Embedding& p : points) {
    std::vector<double> row(dim);
    for (size_t i = 0; i < dim; ++i)
      row[i] = static_cast<double>(p[i]) - plane.mean[i];
    x.push_back(std::move(row));
  }
  if (dim == 0) return plane;
  plane.x_axis = principal_axis(x, {}, &plane.x_variance);
  if (plane.x_variance > 0) {
    plane.y_axis = principal_axis(x, plane.x_axis, &plane.y_variance);
  } else {
    plane.y_axis.assign(dim, 0.0);
  }
  return plane;
}

EpisodeStepPlane project_step(const EpisodeTraceStep& step) {
  EpisodeStepPlane out;
  std::vector<Embedding> fitted;
  for (const EpisodeTraceWindow& w : step.windows)
    fitted.push_back(w.embedding);
  if (fitted.empty())
    for (const EpisodeTraceEpisode& e : step.episodes)
      fitted.push_back(e.centroid);
  out.projection = project_2d(fitted);
  for (const EpisodeTraceWindow& w : step.windows)
    out.windows.push_back(out.projection.apply(w.embedding));
  for (const EpisodeTraceEpisode& e : step.episodes)
    out.centroids.push_back(out.projection.apply(e.centroid));
  out.query = out.projection.apply(step.query.embedding);
  return out;
}

}  // namespace engram
