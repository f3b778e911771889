// EpiCache's conversation clustering (Kim et al., 2025, §3.1 Stage 1; DESIGN.md "EpiCache"): the
// history is cut into windows of w_embed = 4 utterances, each window's unit-normalised embedding
// is clustered by k-means with k-means++ seeding (several restarts, a fixed seed) into E
// episodes; an episode has a unit-normalised centroid (queries are routed to it by cosine, Eq. 7)
// and a medoid: its window nearest the centroid (Eq. 6), which becomes the patched prompt.
//
// Plain std::vector<float> embeddings and no torch: the clustering is a few hundred windows at
// most, and this keeps the unit tests and the translation unit cheap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace engram {

using Embedding = std::vector<float>;

// Utterances [begin, end) of one embedding window.
struct UtteranceWindow {
  size_t begin = 0;
  size_t end = 0;
};

// Consecutive windows of `w_embed` utterances over utterances [first, last) (Eq. 4); the last
// window may be shorter.
std::vector<UtteranceWindow> utterance_windows(size_t first, size_t last, size_t w_embed = 4);

struct EpisodeClustering {
  std::vector<int32_t> assignment;   // episode of each window
  std::vector<Embedding> centroids;  // per episode, unit-normalised
  std::vector<size_t> medoids;       // per episode: the window with the highest cosine to it
  double inertia = 0;                // sum of squared distances of the windows to their centre
  int64_t episodes() const { return static_cast<int64_t>(centroids.size()); }
};

struct ClusteringOptions {
  int32_t episodes = 4;  // E; fewer when there are fewer distinct windows
  int32_t restarts = 8;  // k-means++ seedings; the lowest inertia wins
  int32_t iterations = 100;
  uint64_t seed = 0x5eed;
  int32_t threads = 0;  // restarts run at once; 0: the hardware's threads. The result is the same
};

// k-means over `embeddings` (normalised here; every one the same dimension). Deterministic for
// a given seed, whatever the threads. Episodes that end up empty are dropped, so E <= the number of
// distinct windows.
EpisodeClustering cluster_episodes(const std::vector<Embedding>& embeddings,
                                   const ClusteringOptions& options = {});

// Lloyd iterations from existing `centroids` (a conversation that grew is re-clustered without
// renumbering its episodes): the episode count stays, an episode no window joins keeps its
// centroid and has medoid kNoMedoid. Deterministic; no restarts.
inline constexpr size_t kNoMedoid = static_cast<size_t>(-1);
EpisodeClustering refine_episodes(const std::vector<Embedding>& embeddings,
                                  std::vector<Embedding> centroids, int32_t iterations = 100);

// The mean of `embeddings`, and `v` less it, unit-normalised: the decoder's own states share a
// large common direction (the format, the speaker lines) that would make every cosine ~1.
Embedding mean_embedding(const std::vector<Embedding>& embeddings);
Embedding centred(const Embedding& v, const Embedding& mean);
// Unit-normalises in place (a zero vector stays zero).
void normalize(Embedding& v);
double cosine(const Embedding& a, const Embedding& b);
// The episode whose centroid has the highest cosine with `query` (Eq. 7); ties: the lowest index.
int32_t nearest_episode(const std::vector<Embedding>& centroids, const Embedding& query);

}  // namespace engram
