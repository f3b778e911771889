#include "core/policies/memory_grouping.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

namespace engram {
namespace {

// A cluster while merging: an existing group (id >= 0), which may only absorb, or new segments.
struct Cluster {
  int64_t group = -1;
  std::vector<std::string> members;
  size_t added = 0;  // members that were candidates
  bool alive = true;
};

}  // namespace

MemoryGrouping::MemoryGrouping(GroupingOptions options) : options_(options) {
  if (options_.static_after < 0)
    throw std::invalid_argument("memory grouping: static_after must be >= 0");
  if (options_.max_group_segments < 1)
    throw std::invalid_argument("memory grouping: max_group_segments must be >= 1");
}

const GroupingStep& MemoryGrouping::step(const std::vector<GroupingSegment>& segments) {
  const int64_t s = steps_++;
  std::set<std::string> present;
  for (const GroupingSegment& g : segments) {
    if (!present.insert(g.key).second)
      throw std::invalid_argument("memory grouping: segment '" + g.key + "' given twice");
    if (g.embedding.size() != segments.front().embedding.size())
      throw std::invalid_argument("memory grouping: segment '" + g.key + "' has an embedding of " +
                                  std::to_string(g.embedding.size()) + " values, expected " +
                                  std::to_string(segments.front().embedding.size()));
  }

  std::map<int64_t, bool> dirty;
  auto leave_group = [&](SegmentState& st, const std::string& key) {
    if (st.group < 0) return;
    auto& members = groups_.at(st.group).members;
    members.erase(std::remove(members.begin(), members.end(), key), members.end());
    dirty[st.group] = true;
    st.group = -1;
  };
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (present.count(it->first)) {
      ++it;
      continue;
    }
    leave_group(it->second, it->first);
    it = segments_.erase(it);
  }
  for (const GroupingSegment& g : segments) {
    auto it = segments_.find(g.key);
    if (it == segments_.end()) {
      segments_.emplace(g.key, SegmentState{g.version, s, g.tokens, g.embedding, -1});
      continue;
    }
    SegmentState& st = it->second;
    if (st.version != g.version) {
      st.version = g.version;
      st.last_change = s;
      if (options_.fixed_clusters) {
        if (st.group >= 0) dirty[st.group] = true;  // its cluster's text changed
      } else {
        leave_group(st, g.key);
      }
    }
    st.tokens = g.tokens;
    st.embedding = g.embedding;
  }

  // Who is clustered now: segments turning static, or (fixed clusters) segments seen first.
  std::vector<std::string> candidates;
  for (const GroupingSegment& g : segments) {
    const SegmentState& st = segments_.at(g.key);
    if (st.group < 0 && (options_.fixed_clusters || s - st.last_change >= options_.static_after))
      candidates.push_back(g.key);
  }
  cluster_new_static(segments, candidates, dirty);
  for (const auto& [id, changed] : dirty) {
    if (!changed) continue;
    if (groups_.at(id).members.empty())
      groups_.erase(id);
    else if (!options_.fixed_clusters)
      ++groups_.at(id).version;
  }
  // Whether a group is one unit this step: always once formed, or (fixed clusters) while every
  // member has been unchanged for t steps; a cluster becoming one unit again, or changing while
  // one, gets a new version (its KV is rebuilt).
  std::map<int64_t, bool> one_unit;
  for (auto& [id, group] : groups_) {
    bool whole = true;
    if (options_.fixed_clusters) {
      for (const std::string& key : group.members)
        whole = whole && s - segments_.at(key).last_change >= options_.static_after;
      const auto d = dirty.find(id);
      if (whole && (!group.was_static || (d != dirty.end() && d->second))) ++group.version;
      group.was_static = whole;
    }
    one_unit[id] = whole;
  }

  GroupingStep out;
  out.step = s;
  std::map<int64_t, size_t> unit_of_group;
  for (const GroupingSegment& g : segments) {
    const SegmentState& st = segments_.at(g.key);
    const int64_t group = st.group >= 0 && one_unit.at(st.group) ? st.group : -1;
    out.static_segments += group >= 0;
    if (group >= 0 && unit_of_group.count(group)) {
      GroupedUnit& u = out.units[unit_of_group[group]];
      u.members.push_back(g.key);
      u.tokens += st.tokens;
      continue;
    }
    GroupedUnit u;
    u.key = g.key;
    u.version = st.version;
    u.members = {g.key};
    u.is_static = group >= 0;
    u.tokens = st.tokens;
    if (group >= 0) {
      const Group& whole = groups_.at(group);
      if (whole.members.size() > 1) {
        u.key = "group:" + std::to_string(group);
        u.version = whole.version;
      }
      unit_of_group[group] = out.units.size();
    }
    out.units.push_back(std::move(u));
  }
  std::map<std::string, int64_t> units;
  for (const GroupedUnit& u : out.units) {
    units[u.key] = u.version;
    auto prev = previous_units_.find(u.key);
    if (prev == previous_units_.end() || prev->second != u.version) {
      ++out.units_rebuilt;
      out.tokens_rebuilt += u.tokens;
    }
  }
  previous_units_ = std::move(units);
  last_ = std::move(out);
  return last_;
}

void MemoryGrouping::cluster_new_static(const std::vector<GroupingSegment>& segments,
                                        const std::vector<std::string>& candidates,
                                        std::map<int64_t, bool>& dirty) {
  if (candidates.empty()) return;
  std::vector<Embedding> all;
  for (const GroupingSegment& g : segments)
    all.push_back(g.embedding);
  const Embedding mean = mean_embedding(all);
  std::map<std::string, Embedding> centred_of;
  for (const GroupingSegment& g : segments)
    centred_of[g.key] = centred(g.embedding, mean);

  std::vector<Cluster> clusters;
  for (const auto& [id, group] : groups_)
    if (options_.join_existing &&
        static_cast<int64_t>(group.members.size()) < options_.max_group_segments &&
        !group.members.empty())
      clusters.push_back({id, group.members, 0, true});
  for (const std::string& key : candidates)
    clusters.push_back({-1, {key}, 1, true});

  // Sums of pairwise cosines between clusters (average linkage = sum / (|a|·|b|)).
  const size_t n = clusters.size();
  std::vector<std::vector<double>> sum(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      double v = 0;
      for (const std::string& a : clusters[i].members)
        for (const std::string& b : clusters[j].members)
          v += cosine(centred_of.at(a), centred_of.at(b));
      sum[i][j] = sum[j][i] = v;
    }
  for (;;) {
    double best = options_.join_threshold;
    size_t bi = n, bj = n;
    for (size_t i = 0; i < n; ++i) {
      if (!clusters[i].alive) continue;
      for (size_t j = i + 1; j < n; ++j) {
        if (!clusters[j].alive) continue;
        if (clusters[i].group >= 0 && clusters[j].group >= 0) continue;  // groups never merge
        const size_t size = clusters[i].members.size() + clusters[j].members.size();
        if (static_cast<int64_t>(size) > options_.max_group_segments) continue;
        const double link =
            sum[i][j] / double(clusters[i].members.size() * clusters[j].members.size());
        if (link >= best && (bi == n || link > best)) {
          best = link;
          bi = i;
          bj = j;
        }
      }
    }
    if (bi == n) break;
    // Existing groups come first in `clusters`, so bi holds the group when there is one.
    Cluster& into = clusters[bi];
    Cluster& from = clusters[bj];
    into.members.insert(into.members.end(), from.members.begin(), from.members.end());
    into.added += from.added;
    from.alive = false;
    for (size_t k = 0; k < n; ++k) {
      sum[bi][k] += sum[bj][k];
      sum[k][bi] = sum[bi][k];
    }
  }

  for (const Cluster& c : clusters) {
    if (!c.alive || c.added == 0) continue;
    int64_t id = c.group;
    if (id < 0) {
      id = next_group_++;
      groups_[id].version = 0;  // bumped to 1 below, as every dirty group
    }
    Group& g = groups_.at(id);
    for (const std::string& key : c.members) {
      SegmentState& st = segments_.at(key);
      if (st.group == id) continue;
      st.group = id;
      g.members.push_back(key);
    }
    dirty[id] = true;
  }
}

std::vector<size_t> select_units(const std::vector<GroupedUnit>& units,
                                 const std::map<std::string, double>& segment_score,
                                 int64_t max_segments) {
  std::vector<double> score(units.size(), 0.0);
  for (size_t i = 0; i < units.size(); ++i) {
    double best = -1e300;
    for (const std::string& m : units[i].members) {
      auto it = segment_score.find(m);
      best = std::max(best, it == segment_score.end() ? 0.0 : it->second);
    }
    score[i] = best;
  }
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score[a] > score[b]; });
  std::vector<size_t> out;
  int64_t left = max_segments;
  for (size_t i : order) {
    const auto size = static_cast<int64_t>(units[i].members.size());
    if (size > left) continue;
    out.push_back(i);
    left -= size;
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace engram
