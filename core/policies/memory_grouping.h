// KEEP's Static-Dynamic Memory Construction (Yang et al., 2026, §4.1; issue 16): which memory
// segments share one KV. A segment is *static* once its version has not changed for `t` steps
// (a new segment starts dynamic); static segments are clustered by embedding into groups, and a
// static group is ONE unit (its members' tokens concatenated and prefilled together after the
// prefix: full attention inside the group); a dynamic segment is a unit of its own. A member that
// changes leaves its group (it is dynamic again) and the group's KV is rebuilt; a segment that
// turns static joins or forms a group (that group is rebuilt). Groups are never re-clustered
// otherwise, so their KV is reused for as long as nothing in them changes.
//
// Clustering: agglomerative, average linkage over cosine of centred embeddings (the model's own
// pooled states share a large common direction, text_embedding.h), merging while the best pair
// reaches `join_threshold`; only the segments that turned static this step move: two existing
// groups are never merged. Deterministic (ties go to the lowest index; no random seeding).
//
// Tensor-free (plain vectors): the policy decides, the runtime prefills what it returns.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/policies/episode_clustering.h"

namespace engram {

// One memory segment as the agent holds it this step (input order = the trained prompt order).
struct GroupingSegment {
  std::string key;
  int64_t version = 0;
  int64_t tokens = 0;   // its token count, for the invalidation counters
  Embedding embedding;  // of this version; every segment the same dimension
};

struct GroupingOptions {
  int64_t static_after = 10;       // t: unchanged steps before a segment is static (paper: 10)
  double join_threshold = 0.3;     // centred cosine (average linkage) two clusters need to merge
  int64_t max_group_segments = 8;  // a larger group invalidates more tokens per change
  // Whether a segment turning static may join an existing group (rebuilding it) or only form new
  // groups with the segments turning static in the same step.
  bool join_existing = true;
  // The paper's variant (KEEP §4.1 as the authors describe it: "a group is static if all its
  // segments have stayed unchanged"): every segment joins a semantic cluster when it first
  // appears and stays in it; a cluster is one unit only while all its members have been unchanged
  // for t steps, and otherwise each member is a unit of its own. A change splits the whole
  // cluster into segments (their KV rebuilt), and it is rebuilt as one unit t steps later.
  // false (Engram's default): only the segments that are static are clustered, and a change
  // takes just that segment out of its group.
  bool fixed_clusters = false;
};

// A unit of the step: a static group (key "group:<id>") or a dynamic segment (its own key). A
// static group of one member is that segment's unit (same key and KV: nothing to rebuild).
struct GroupedUnit {
  std::string key;
  int64_t version = 0;               // a group's bumps whenever its members change
  std::vector<std::string> members;  // input order
  bool is_static = false;
  int64_t tokens = 0;
};

struct GroupingStep {
  int64_t step = 0;
  std::vector<GroupedUnit> units;  // ordered by each unit's first member's input position
  // Units whose (key, version) was not a unit of the previous step: their KV is computed now.
  int64_t units_rebuilt = 0;
  int64_t tokens_rebuilt = 0;
  int64_t static_segments = 0;
};

class MemoryGrouping {
 public:
  explicit MemoryGrouping(GroupingOptions options = {});

  // Advances one agent step. Throws std::invalid_argument for duplicate keys or embeddings of
  // different dimensions.
  const GroupingStep& step(const std::vector<GroupingSegment>& segments);
  const GroupingStep& last() const { return last_; }
  const GroupingOptions& options() const { return options_; }

 private:
  struct SegmentState {
    int64_t version = 0;
    int64_t last_change = 0;
    int64_t tokens = 0;
    Embedding embedding;
    int64_t group = -1;  // id, or -1 while dynamic
  };
  struct Group {
    int64_t version = 1;
    std::vector<std::string> members;
    bool was_static = false;  // fixed_clusters: one unit at the previous step
  };

  void cluster_new_static(const std::vector<GroupingSegment>& segments,
                          const std::vector<std::string>& candidates,
                          std::map<int64_t, bool>& dirty);

  GroupingOptions options_;
  int64_t steps_ = 0;
  int64_t next_group_ = 0;
  std::map<std::string, SegmentState> segments_;
  std::map<int64_t, Group> groups_;
  std::map<std::string, int64_t> previous_units_;  // key -> version of the last step's units
  GroupingStep last_;
};

// Retrieval at the unit level (§4.1): a unit scores its best member's `segment_score` (a group
// is as relevant as its most relevant member); units are taken best first, each only if all its
// members fit in what is left of `max_segments` (a group is never split). Returns indices into
// `units`, ascending (prompt order). Ties: the earlier unit.
std::vector<size_t> select_units(const std::vector<GroupedUnit>& units,
                                 const std::map<std::string, double>& segment_score,
                                 int64_t max_segments);

}  // namespace engram
