// EpiCache online, in a chat (Kim et al., 2025, §3.1 Stage 1 and Stage 3; DESIGN.md "EpiCache"):
// the conversation's utterances are cut into windows of w_embed lines, embedded once each and,
// when the conversation first outgrows the KV budget, clustered into E episodes (centroid +
// medoid window, whose text becomes the episode's patched prompt). Every later user turn is
// embedded the same way and routed to the nearest centroid (Eq. 7); when even the best cosine is
// below τ a new episode is created from the turn (3b-2); an episode fed more than
// `rebuild_tokens` since its cache was built makes the router re-cluster the windows (warm start
// from the current centroids, so episodes keep their numbers) and asks for that episode's cache
// to be rebuilt with its updated patch.
//
// Tensor-free: the router decides, ChatSession keeps one KV working set per episode and applies
// the decision (core/engine/chat_session.h). Texts are embedded through a callback (the model's
// own states by default, core/policies/text_embedding.h), each window once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/policies/episode_clustering.h"

namespace engram {

struct EpisodeRouterOptions {
  int32_t episodes = 4;        // E at the first clustering
  size_t w_embed = 4;          // utterances per window
  double tau = 0.0;            // a new episode when the best cosine is below (0 = never below)
  int32_t max_episodes = 8;    // no new episode beyond this many
  bool centre = true;          // centre embeddings on the mean window (the model's own states)
  int64_t rebuild_tokens = 0;  // re-cluster + rebuild when an episode was fed more (0 = never)
};

struct ChatEpisode {
  Embedding centroid;           // unit, centred space
  size_t medoid = kNoMedoid;    // window index, or none (an episode created from a query)
  std::string patch_source;     // the medoid window's text, or the query line that created it
  std::vector<size_t> windows;  // member windows
  int64_t fed_since_build = 0;  // tokens fed into its cache since it was (re)built
  bool created = false;         // created from a query (3b-2), not by clustering
};

struct EpisodeRoute {
  int32_t episode = -1;                // -1: not clustered (the conversation fits the budget)
  std::vector<double> cosines;         // the query's cosine to every centroid (before a creation)
  bool created = false;                // `episode` was created from this query
  bool clustered = false;              // this route ran the first clustering
  bool reclustered = false;            // the windows were re-clustered (patches may have changed)
  bool rebuild = false;                // the routed episode's cache must be rebuilt from the text
  std::vector<int32_t> patch_changed;  // episodes whose patch_source changed
  double embed_ms = 0;                 // embedding new windows and the query (bench epicache)
  double cluster_ms = 0;               // k-means of a clustering or re-clustering
  Embedding query;                     // the turn's embedding, centred (the centroids' space)
};

// Embeds one text (a window's lines or a query line) to a raw, not yet centred, vector.
using TextEmbedder = std::function<Embedding(const std::string&)>;
// The same for several texts at once (a batched forward: core/policies/text_embedding.h).
using TextsEmbedder = std::function<std::vector<Embedding>(const std::vector<std::string>&)>;

class EpisodeRouter {
 public:
  explicit EpisodeRouter(EpisodeRouterOptions options = {}) : options_(options) {}

  // The line an utterance contributes to a window, in the conversation world's form
  // (`speaker said, "text"`): "user" -> User, anything else -> Assistant.
  static std::string utterance_line(const std::string& role, const std::string& text);

  // Routes the turn `query_line` given the conversation's utterance lines before it. Nothing is
  // clustered while `over_budget` is false (the whole conversation fits: one cache is exact).
  EpisodeRoute route(const std::vector<std::string>& lines, const std::string& query_line,
                     bool over_budget, const TextsEmbedder& embed);
  EpisodeRoute route(const std::vector<std::string>& lines, const std::string& query_line,
                     bool over_budget, const TextEmbedder& embed);
  // Between turns (the paper refreshes an episode when it outgrows its budget, whether or not a
  // question goes to it): the episode fed furthest past `rebuild_tokens`, -1 when none is;
  // refresh(e) gives it now the re-clustering a turn routed there would do (the windows of
  // `lines`, every utterance line so far, embedded first), and `rebuild` asks for its cache to
  // be rebuilt (false for an edited history: the next turn starts over).
  int32_t rebuild_due() const;
  EpisodeRoute refresh(int32_t episode, const std::vector<std::string>& lines,
                       const TextsEmbedder& embed);
  // Between turns, before the first clustering (a long conversation opened or imported, or one
  // that outgrew the budget with its last reply): embeds the windows of `lines` not embedded
  // yet, in order, stopping once `max_chars` of their text are done (one window at least).
  // cluster_now() then clusters them as the first turn over the budget would; the next route()
  // only matches its query. Returns the windows embedded so far out of all of `lines`.
  struct Indexed {
    size_t done = 0;
    size_t total = 0;
  };
  Indexed index(const std::vector<std::string>& lines, const TextsEmbedder& embed,
                size_t max_chars);
  EpisodeRoute cluster_now();
  // `tokens` more were fed into episode `e`'s cache; built(e): its cache was (re)built now.
  void fed(int32_t episode, int64_t tokens);
  void built(int32_t episode);
  // Forgets every window and episode (a conversation replaced below what was clustered).
  void reset();

  bool clustered() const { return !episodes_.empty(); }
  const EpisodeRouterOptions& options() const { return options_; }
  const std::vector<ChatEpisode>& episodes() const { return episodes_; }
  const std::vector<std::string>& window_texts() const { return window_texts_; }
  const std::vector<Embedding>& window_embeddings() const { return raw_; }  // raw
  const Embedding& mean() const { return mean_; }
  // The window -> episode assignment of the last clustering (-1: a window added since).
  std::vector<int32_t> assignment() const;
  // The centred embedding of a raw one (the space of the centroids).
  Embedding centre(const Embedding& raw) const;

  // Puts back a persisted state (conversation store): raw window embeddings with their texts,
  // the mean, the episodes. Throws std::invalid_argument when they do not fit together.
  void restore(std::vector<std::string> window_texts, std::vector<Embedding> raw, Embedding mean,
               std::vector<ChatEpisode> episodes);

 private:
  // Brings the windows in line with `lines`: keeps the embedded prefix whose texts are unchanged
  // and returns the texts of the rest in `fresh` (route() embeds them with the query). Returns
  // false when a window that was clustered changed (edited history).
  bool sync_windows(const std::vector<std::string>& lines, std::vector<std::string>& fresh);
  void add_windows(std::vector<std::string> texts, std::vector<Embedding> embedded);
  void cluster();
  void recluster(EpisodeRoute& route);
  std::vector<Embedding> centred_windows() const;

  EpisodeRouterOptions options_;
  std::vector<std::string> window_texts_;
  std::vector<Embedding> raw_;
  size_t clustered_windows_ = 0;  // windows the last clustering saw (complete ones are fixed)
  Embedding mean_;
  std::vector<ChatEpisode> episodes_;
};

}  // namespace engram
