#include "core/policies/episode_router.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace engram {

std::string EpisodeRouter::utterance_line(const std::string& role, const std::string& text) {
  return std::string(role == "user" ? "User" : "Assistant") + " said, \"" + text + "\"\n";
}

Embedding EpisodeRouter::centre(const Embedding& raw) const {
  if (!options_.centre || mean_.empty()) {
    Embedding v = raw;
    normalize(v);
    return v;
  }
  return centred(raw, mean_);
}

std::vector<Embedding> EpisodeRouter::centred_windows() const {
  std::vector<Embedding> out;
  out.reserve(raw_.size());
  for (const Embedding& e : raw_)
    out.push_back(centre(e));
  return out;
}

std::vector<int32_t> EpisodeRouter::assignment() const {
  std::vector<int32_t> a(window_texts_.size(), -1);
  for (size_t e = 0; e < episodes_.size(); ++e)
    for (size_t w : episodes_[e].windows)
      if (w < a.size()) a[w] = static_cast<int32_t>(e);
  return a;
}

void EpisodeRouter::reset() {
  window_texts_.clear();
  raw_.clear();
  clustered_windows_ = 0;
  mean_.clear();
  episodes_.clear();
}

bool EpisodeRouter::sync_windows(const std::vector<std::string>& lines,
                                 std::vector<std::string>& fresh) {
  std::vector<std::string> texts;
  for (const UtteranceWindow& w : utterance_windows(0, lines.size(), options_.w_embed)) {
    std::string text;
    for (size_t i = w.begin; i < w.end; ++i)
      text += lines[i];
    texts.push_back(std::move(text));
  }
  size_t same = 0;
  while (same < texts.size() && same < window_texts_.size() && texts[same] == window_texts_[same])
    ++same;
  // A clustered window may only have grown (the partial last one gains lines); anything else is
  // an edited or replaced history.
  for (size_t i = same; i < std::min(clustered_windows_, window_texts_.size()); ++i) {
    const bool grew =
        i + 1 == window_texts_.size() && i < texts.size() && texts[i].starts_with(window_texts_[i]);
    if (!grew) return false;
  }
  window_texts_.resize(same);
  raw_.resize(same);
  fresh.assign(texts.begin() + static_cast<std::ptrdiff_t>(same), texts.end());
  return true;
}

void EpisodeRouter::cluster() {
  mean_ = options_.centre ? mean_embedding(raw_) : Embedding{};
  ClusteringOptions co;
  co.episodes = std::max(1, options_.episodes);
  const EpisodeClustering c = cluster_episodes(centred_windows(), co);
  episodes_.clear();
  for (int64_t e = 0; e < c.episodes(); ++e) {
    ChatEpisode ep;
    ep.centroid = c.centroids[e];
    ep.medoid = c.medoids[e];
    ep.patch_source = window_texts_[ep.medoid];
    episodes_.push_back(std::move(ep));
  }
  for (size_t w = 0; w < c.assignment.size(); ++w)
    episodes_[c.assignment[w]].windows.push_back(w);
  clustered_windows_ = window_texts_.size();
}

void EpisodeRouter::recluster(EpisodeRoute& route) {
  std::vector<Embedding> centroids;
  for (const ChatEpisode& e : episodes_)
    centroids.push_back(e.centroid);
  const EpisodeClustering c = refine_episodes(centred_windows(), std::move(centroids));
  for (size_t e = 0; e < episodes_.size(); ++e) {
    ChatEpisode& ep = episodes_[e];
    ep.centroid = c.centroids[e];
    ep.windows.clear();
    // An episode no window joined keeps its patch (a created episode's query line).
    if (c.medoids[e] == kNoMedoid) continue;
    const std::string& source = window_texts_[c.medoids[e]];
    if (source != ep.patch_source) route.patch_changed.push_back(static_cast<int32_t>(e));
    ep.medoid = c.medoids[e];
    ep.patch_source = source;
  }
  for (size_t w = 0; w < c.assignment.size(); ++w)
    episodes_[c.assignment[w]].windows.push_back(w);
  clustered_windows_ = window_texts_.size();
  route.reclustered = true;
}

EpisodeRoute EpisodeRouter::route(const std::vector<std::string>& lines,
                                  const std::string& query_line, bool over_budget,
                                  const TextEmbedder& embed) {
  return route(lines, query_line, over_budget, [&embed](const std::vector<std::string>& texts) {
    std::vector<Embedding> out;
    for (const std::string& t : texts)
      out.push_back(embed(t));
    return out;
  });
}

EpisodeRoute EpisodeRouter::route(const std::vector<std::string>& lines,
                                  const std::string& query_line, bool over_budget,
                                  const TextsEmbedder& embed) {
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  EpisodeRoute route;
  auto t0 = Clock::now();
  std::vector<std::string> fresh;
  if (!sync_windows(lines, fresh)) {
    reset();
    (void)sync_windows(lines, fresh);
  }
  // The new windows and the query in one call (one forward on the model's device) when the
  // turn is routed; before the history outgrows the budget only the windows are embedded.
  const bool routes = clustered() || (over_budget && (!raw_.empty() || !fresh.empty()));
  // The query rides at the end of the new windows' texts (no copy of them: a first clustering
  // embeds every window of the history).
  if (routes) fresh.push_back(query_line);
  std::vector<Embedding> embedded = fresh.empty() ? std::vector<Embedding>{} : embed(fresh);
  if (embedded.size() != fresh.size())
    throw std::logic_error("EpisodeRouter: the embedder returned a different number of texts");
  Embedding query_raw;
  if (routes) {
    query_raw = std::move(embedded.back());
    embedded.pop_back();
    fresh.pop_back();
  }
  add_windows(std::move(fresh), std::move(embedded));
  route.embed_ms = ms_since(t0);
  if (!clustered()) {
    if (!routes) return route;
    t0 = Clock::now();
    cluster();
    route.cluster_ms = ms_since(t0);
    route.clustered = true;
  }
  route.query = centre(query_raw);  // centred on the mean fixed at clustering
  const Embedding& query = route.query;
  int32_t best = 0;
  for (size_t e = 0; e < episodes_.size(); ++e) {
    route.cosines.push_back(cosine(query, episodes_[e].centroid));
    if (route.cosines[e] > route.cosines[best]) best = static_cast<int32_t>(e);
  }
  if (route.cosines[best] < options_.tau &&
      static_cast<int32_t>(episodes_.size()) < options_.max_episodes) {
    ChatEpisode ep;
    ep.centroid = query;
    ep.patch_source = query_line;
    ep.created = true;
    episodes_.push_back(std::move(ep));
    best = static_cast<int32_t>(episodes_.size()) - 1;
    route.created = true;
  }
  route.episode = best;
  const ChatEpisode& routed = episodes_[best];
  if (options_.rebuild_tokens > 0 && routed.fed_since_build > options_.rebuild_tokens) {
    t0 = Clock::now();
    recluster(route);
    route.cluster_ms += ms_since(t0);
    route.rebuild = true;
  }
  return route;
}

void EpisodeRouter::add_windows(std::vector<std::string> texts, std::vector<Embedding> embedded) {
  if (embedded.size() != texts.size())
    throw std::logic_error("EpisodeRouter: the embedder returned a different number of texts");
  for (size_t i = 0; i < texts.size(); ++i) {
    raw_.push_back(std::move(embedded[i]));
    window_texts_.push_back(std::move(texts[i]));
  }
}

int32_t EpisodeRouter::rebuild_due() const {
  if (options_.rebuild_tokens <= 0) return -1;
  int32_t due = -1;
  for (size_t e = 0; e < episodes_.size(); ++e) {
    const int64_t fed = episodes_[e].fed_since_build;
    if (fed > options_.rebuild_tokens && (due < 0 || fed > episodes_[due].fed_since_build))
      due = static_cast<int32_t>(e);
  }
  return due;
}

EpisodeRoute EpisodeRouter::refresh(int32_t episode, const std::vector<std::string>& lines,
                                    const TextsEmbedder& embed) {
  EpisodeRoute route;
  if (episode < 0 || static_cast<size_t>(episode) >= episodes_.size()) return route;
  std::vector<std::string> fresh;
  if (!sync_windows(lines, fresh)) return route;  // an edited history: the next turn starts over
  if (!fresh.empty()) {
    std::vector<Embedding> embedded = embed(fresh);
    add_windows(std::move(fresh), std::move(embedded));
  }
  recluster(route);
  route.episode = episode;
  route.rebuild = true;
  return route;
}

EpisodeRouter::Indexed EpisodeRouter::index(const std::vector<std::string>& lines,
                                            const TextsEmbedder& embed, size_t max_chars) {
  std::vector<std::string> fresh;
  if (!sync_windows(lines, fresh)) return {window_texts_.size(), window_texts_.size()};
  const size_t total = window_texts_.size() + fresh.size();
  size_t take = 0, chars = 0;
  while (take < fresh.size() && (take == 0 || chars < max_chars))
    chars += fresh[take++].size();
  if (take > 0) {
    fresh.resize(take);
    std::vector<Embedding> embedded = embed(fresh);
    add_windows(std::move(fresh), std::move(embedded));
  }
  return {window_texts_.size(), total};
}

EpisodeRoute EpisodeRouter::cluster_now() {
  EpisodeRoute route;
  if (clustered() || raw_.empty()) return route;
  const auto t0 = std::chrono::steady_clock::now();
  cluster();
  route.cluster_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  route.clustered = true;
  return route;
}

void EpisodeRouter::fed(int32_t episode, int64_t tokens) {
  episodes_.at(static_cast<size_t>(episode)).fed_since_build += tokens;
}

void EpisodeRouter::built(int32_t episode) {
  episodes_.at(static_cast<size_t>(episode)).fed_since_build = 0;
}

void EpisodeRouter::restore(std::vector<std::string> window_texts, std::vector<Embedding> raw,
                            Embedding mean, std::vector<ChatEpisode> episodes) {
  if (window_texts.size() != raw.size())
    throw std::invalid_argument("EpisodeRouter::restore: window texts and embeddings differ");
  for (const ChatEpisode& e : episodes) {
    for (size_t w : e.windows)
      if (w >= raw.size()) throw std::invalid_argument("EpisodeRouter::restore: bad member");
    if (e.medoid != kNoMedoid && e.medoid >= raw.size())
      throw std::invalid_argument("EpisodeRouter::restore: bad medoid");
    if (!raw.empty() && e.centroid.size() != raw.front().size())
      throw std::invalid_argument("EpisodeRouter::restore: centroid dimension");
  }
  window_texts_ = std::move(window_texts);
  raw_ = std::move(raw);
  mean_ = std::move(mean);
  episodes_ = std::move(episodes);
  clustered_windows_ = episodes_.empty() ? 0 : window_texts_.size();
}

}  // namespace engram
