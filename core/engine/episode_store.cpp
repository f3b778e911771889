#include "core/engine/episode_store.h"

#include <optional>
#include <vector>

#include "storage/embedding_repository.h"
#include "storage/episode_repository.h"
#include "storage/memory_repository.h"

namespace engram {
namespace {

constexpr const char* kWindowKind = "chat_window";
constexpr const char* kQueryKind = "chat_query";
constexpr const char* kMeanKind = "chat_window_mean";

std::string window_key(size_t index) {
  return std::string(kWindowKind) + ":" + std::to_string(index);
}
std::string query_key(size_t episode) {
  return std::string(kQueryKind) + ":" + std::to_string(episode);
}

// The index in a "kind:index" key, or -1.
int64_t key_index(const std::string& key, const std::string& kind) {
  if (key.size() <= kind.size() + 1 || key.compare(0, kind.size() + 1, kind + ":") != 0) return -1;
  try {
    return std::stoll(key.substr(kind.size() + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

void save_episodes(storage::Database& db, int64_t conversation_id, const EpisodeRouter& router,
                   const std::string& embedding_model) {
  storage::MemoryRepository segments(db);
  storage::EmbeddingRepository vectors(db);
  storage::EpisodeRepository episodes(db);
  const std::vector<std::string>& texts = router.window_texts();
  std::vector<int64_t> window_ids;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto before = segments.find_segment(conversation_id, window_key(i));
    const storage::MemorySegment s =
        segments.upsert_segment(conversation_id, kWindowKind, window_key(i), texts[i], 0);
    window_ids.push_back(s.id);
    const storage::UnitRef owner{conversation_id, kWindowKind, s.id};
    if (before && before->text == texts[i] && vectors.find(owner, embedding_model)) continue;
    vectors.put({owner, embedding_model, router.window_embeddings()[i]});
  }
  const std::vector<ChatEpisode>& eps = router.episodes();
  for (const storage::MemorySegment& s : segments.segments(conversation_id)) {
    const int64_t w = key_index(s.key, kWindowKind);
    const int64_t q = key_index(s.key, kQueryKind);
    if ((w >= 0 && static_cast<size_t>(w) >= texts.size()) ||
        (q >= 0 && (static_cast<size_t>(q) >= eps.size() || !eps[q].created)))
      segments.remove_segment(s.id);
  }
  if (!router.mean().empty())
    vectors.put({{conversation_id, kMeanKind, 0}, embedding_model, router.mean()});
  for (size_t e = 0; e < eps.size(); ++e) {
    storage::Episode row;
    row.conversation_id = conversation_id;
    row.index = static_cast<int64_t>(e);
    row.centroid = eps[e].centroid;
    if (eps[e].created) {
      row.medoid_segment_id =
          segments.upsert_segment(conversation_id, kQueryKind, query_key(e), eps[e].patch_source, 0)
              .id;
    } else if (eps[e].medoid != kNoMedoid) {
      row.medoid_segment_id = window_ids[eps[e].medoid];
    }
    for (size_t w : eps[e].windows)
      row.segment_ids.push_back(window_ids[w]);
    const auto stored = episodes.find(conversation_id, row.index);
    if (stored && stored->centroid == row.centroid &&
        stored->medoid_segment_id == row.medoid_segment_id &&
        stored->segment_ids == row.segment_ids)
      continue;
    episodes.save(row);
  }
  for (const storage::Episode& stored : episodes.list(conversation_id))
    if (stored.index >= static_cast<int64_t>(eps.size())) episodes.remove(stored.id);
}

bool restore_episodes(storage::Database& db, int64_t conversation_id, EpisodeRouter& router,
                      const std::string& embedding_model) {
  storage::MemoryRepository segments(db);
  storage::EmbeddingRepository vectors(db);
  storage::EpisodeRepository episodes(db);
  const std::vector<storage::Episode> rows = episodes.list(conversation_id);
  if (rows.empty()) return false;
  std::vector<std::string> texts;
  std::vector<Embedding> raw;
  std::vector<storage::MemorySegment> windows;
  for (const storage::MemorySegment& s : segments.segments(conversation_id)) {
    const int64_t w = key_index(s.key, kWindowKind);
    if (w < 0) continue;
    if (static_cast<size_t>(w) >= windows.size()) windows.resize(static_cast<size_t>(w) + 1);
    windows[static_cast<size_t>(w)] = s;
  }
  std::vector<int64_t> ids;
  for (const storage::MemorySegment& s : windows) {
    if (s.id == 0) return false;  // a gap: not a state the router wrote
    const auto v = vectors.find({conversation_id, kWindowKind, s.id}, embedding_model);
    if (!v) return false;  // another model's vectors
    texts.push_back(s.text);
    raw.push_back(v->vector);
    ids.push_back(s.id);
  }
  const auto mean = vectors.find({conversation_id, kMeanKind, 0}, embedding_model);
  const auto window_index = [&](int64_t segment_id) -> std::optional<size_t> {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == segment_id) return i;
    return std::nullopt;
  };
  std::vector<ChatEpisode> eps;
  for (const storage::Episode& row : rows) {
    if (row.index != static_cast<int64_t>(eps.size())) return false;
    ChatEpisode e;
    e.centroid = row.centroid;
    for (int64_t id : row.segment_ids) {
      const auto w = window_index(id);
      if (!w) return false;
      e.windows.push_back(*w);
    }
    if (row.medoid_segment_id) {
      if (const auto w = window_index(*row.medoid_segment_id)) {
        e.medoid = *w;
        e.patch_source = texts[*w];
      } else {
        const storage::MemorySegment q = segments.load_segment(*row.medoid_segment_id);
        e.created = q.kind == kQueryKind;
        e.patch_source = q.text;
      }
    }
    eps.push_back(std::move(e));
  }
  try {
    router.restore(std::move(texts), std::move(raw), mean ? mean->vector : Embedding{},
                   std::move(eps));
  } catch (const std::invalid_argument&) {
    return false;
  }
  return true;
}

}  // namespace engram
