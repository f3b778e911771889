// The trace of EpiCache's episodes that the episodes panel reads (issue 15, "Panel"): per routed
// query (an evaluation's question or a chat's user turn), the conversation's embedding windows,
// the episodes they were clustered into (centroid, medoid, members, cache size, per-layer
// budgets) and the query's routing (its cosine to every centroid, the episode chosen, whether it
// opened a new one). Written by `engram-cli eval conversation --policy epicache --episodes-trace
// FILE`; chat-time episodes produce the same steps live. Read by ui/episodes_panel.h.
// Tensor-free and Qt-free (episode_clustering.h's plain embeddings).
//
// project_2d() is the panel's 2D picture: the windows' two principal axes, onto which the
// centroids and the query are projected too, so that tests and the panel agree on positions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/policies/episode_clustering.h"

namespace engram {

// NOTE: written to disk; a change of meaning bumps kEpisodeTraceVersion.
inline constexpr const char* kEpisodeTraceFormat = "engram-episode-trace";
inline constexpr int kEpisodeTraceVersion = 1;

// τ of a router that never opens an episode (offline evaluation): no cosine is below -1.
inline constexpr double kNoNewEpisodes = -1.0;

struct EpisodeTraceWindow {
  int64_t index = 0;
  int64_t begin = 0;  // utterances [begin, end) of the conversation
  int64_t end = 0;
  std::string label;    // the window's text, cut by trace_label() (recompute_trace.h)
  Embedding embedding;  // as clustered (centred and unit-normalised when the policy does so)
};

struct EpisodeTraceEpisode {
  int64_t index = 0;
  Embedding centroid;
  int64_t medoid = 0;                  // a window index; -1: none (created from a query)
  std::vector<int64_t> members;        // window indices, ascending
  int64_t cache_tokens = 0;            // slots in its KV (per layer and head)
  int64_t fed_tokens = 0;              // tokens appended to its cache since it was built
  bool built = false;                  // built or rebuilt at this step
  std::vector<int64_t> layer_budgets;  // slots per layer; empty: uniform (the step's budget)
};

struct EpisodeTraceQuery {
  std::string label;  // the query's text, cut by trace_label()
  Embedding embedding;
  int64_t episode = 0;          // the episode it was routed to; -1 while there is none
  std::vector<double> cosines;  // to every episode's centroid, by episode index (when `created`:
                                // may lack the new episode's, the last)
  bool created = false;         // its best cosine was below τ: `episode` is new
  double tau = kNoNewEpisodes;  // kNoNewEpisodes when the router never creates one
};

struct EpisodeTraceStep {
  int64_t turn = 0;    // the question's (or the user turn's) index in its conversation
  std::string spec;    // the policy's full spec
  int64_t budget = 0;  // M, KV slots per layer (0: unbounded)
  int64_t layers = 0;  // the model's, for uniform budget bars
  std::vector<EpisodeTraceWindow> windows;
  std::vector<EpisodeTraceEpisode> episodes;
  EpisodeTraceQuery query;
};

struct EpisodeTrace {
  std::string model;
  std::vector<EpisodeTraceStep> steps;
};

// A step from a clustering of `windows` (their texts and embeddings, as clustered; a window
// assigned -1 belongs to no episode yet) and a query routed to episode `routed`; the cosines to
// the centroids are computed here. The caller fills
// turn, spec, budget, layers and each episode's cache fields. Throws std::invalid_argument when
// the vectors disagree in length or `routed` is not an episode.
EpisodeTraceStep make_episode_trace_step(const std::vector<UtteranceWindow>& windows,
                                         const std::vector<std::string>& texts,
                                         const std::vector<Embedding>& embeddings,
                                         const EpisodeClustering& clustering,
                                         const std::string& query_text, const Embedding& query,
                                         int32_t routed);

// Throws std::invalid_argument naming what is inconsistent (an index out of range, embeddings
// of different dimensions, one cosine per episode, a budget vector not one per layer).
void validate_episode_trace_step(const EpisodeTraceStep& step);

void to_json(nlohmann::json& j, const EpisodeTrace& trace);
// Throws std::runtime_error naming the JSON path of a missing, mistyped or inconsistent field.
void from_json(const nlohmann::json& j, EpisodeTrace& trace);

// Crash-safe: a temporary file beside `path`, fsynced and renamed over it (storage/durable_file.h).
// Throws storage::StoreError (a std::runtime_error) naming the file.
void write_episode_trace(const std::filesystem::path& path, const EpisodeTrace& trace);
// Throws std::runtime_error naming the file and what is wrong (unreadable, not JSON with the
// byte offset, another format or version, a field missing, mistyped or inconsistent).
EpisodeTrace read_episode_trace(const std::filesystem::path& path);

struct PlanePoint {
  double x = 0;
  double y = 0;
};

// The plane of a point set's two principal axes (PCA by power iteration): `x_axis` the direction
// of most variance, `y_axis` the most orthogonal to it; each unit length, or zero where the
// points have no spread left. Signs are fixed (an axis's largest-magnitude coordinate is
// positive, the first such on ties), so the same points always give the same picture.
struct PlaneProjection {
  std::vector<double> mean;
  std::vector<double> x_axis;
  std::vector<double> y_axis;
  double x_variance = 0;  // of the points along each axis
  double y_variance = 0;
  // Throws std::invalid_argument when `v` has another dimension than the fitted points.
  PlanePoint apply(const Embedding& v) const;
};

// Fits the plane to `points` (all of one dimension, else std::invalid_argument); no points: an
// empty projection that maps every vector to (0, 0).
PlaneProjection project_2d(const std::vector<Embedding>& points);

// A step on the plane of its windows (of its centroids when it has no windows yet): every
// window, every centroid and the query.
struct EpisodeStepPlane {
  PlaneProjection projection;
  std::vector<PlanePoint> windows;    // by window index
  std::vector<PlanePoint> centroids;  // by episode index
  PlanePoint query;
};
EpisodeStepPlane project_step(const EpisodeTraceStep& step);

}  // namespace engram
