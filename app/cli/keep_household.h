// The household planner's prompt as KEEP assembles it (issue 16): the shared system prefix (BOS:
// the trained prompt has no system text), then the retrieved memory units, then the query (task,
// history, "next:").
//
// Units, by grouping (`--grouping`):
// - segments: every memory segment is its own unit (one KV each), in the trained order.
// - static-dynamic (KEEP §4.1, core/policies/memory_grouping.h): a segment unchanged for t steps
//   is static and joins a group of static segments with similar pooled states (the model's own,
//   cached per (segment, version)); a static group is one unit, its members' tokens prefilled
//   together; a dynamic segment is a unit of its own. A unit takes the place of its first member
//   in the trained order, its members follow in trained order: where a group's members are not
//   adjacent, the segments between them come after the group (the one reordering the trained
//   prompt sees; `in_trained_order` says when it happened).
// - clusters: static-dynamic as the paper states it (GroupingOptions::fixed_clusters): every
//   segment joins a semantic cluster when it first appears; a cluster is one unit only while all
//   its members have been unchanged for t steps, otherwise each member is its own unit.
// - blocks:N (the paper's "w/o static-dynamic" ablation): the retrieved segments' tokens in the
//   trained order cut into blocks of N tokens; any change in a block rebuilds it.
//
// Retrieval keeps at most `max_segments` segments, at the unit level: the few non-object segments
// (the examples, the room list, finished tasks, the agent's state) score above every object, the
// objects score by similarity to the query (LexicalEmbedder cosine; the paper's sentence encoder
// cannot be bundled); a static group scores its best member and is taken whole or not at all.
// A segment's tokens are encoded as they read after a newline, so the assembled ids equal the
// encoding of the assembled text (`tokens_match_text` says when they do not).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/memory_unit_kv.h"
#include "core/env/embodied_prompt.h"
#include "core/policies/memory_grouping.h"
#include "core/tokenizer/tokenizer.h"

namespace engram::cli {

struct KeepHouseholdPrompt {
  std::vector<int64_t> prefix;                    // BOS
  std::vector<MemoryUnit> units;                  // retrieved, prompt order
  std::vector<std::vector<std::string>> members;  // per unit: its segments (blocks: those touched)
  std::vector<int64_t> query;
  int64_t available_segments = 0;  // segments the full prompt holds
  int64_t retrieved_segments = 0;
  bool tokens_match_text = true;  // prefix + units + query == BOS + encode(their text)
  // BOS + the same retrieved segments in the trained order + the query, and whether the units'
  // order is that order (static groups of non-adjacent members move segments).
  std::vector<int64_t> trained_order_ids;
  bool in_trained_order = true;
  std::vector<int64_t> ids() const;  // prefix + units + query
};

struct HouseholdGrouping {
  enum class Kind { kSegments, kStaticDynamic, kBlocks };
  Kind kind = Kind::kStaticDynamic;
  int64_t block_tokens = 0;  // kBlocks
  GroupingOptions options;   // kStaticDynamic ("clusters": options.fixed_clusters)
  std::string name() const;  // as parsed
};

// "segments" | "static-dynamic" | "clusters" | "blocks:N"; anything else throws
// std::invalid_argument listing what exists.
HouseholdGrouping parse_household_grouping(const std::string& spec);

// A segment's pooled embedding (static-dynamic only).
using SegmentEmbedder = std::function<Embedding(const std::string& text)>;

// One session's memory units: call observe() once per agent step (the static/dynamic state
// advances), then assemble() at any segment counts for that step.
class HouseholdMemoryUnits {
 public:
  HouseholdMemoryUnits(HouseholdGrouping grouping, SegmentEmbedder embed);

  const GroupingStep& observe(const Tokenizer& tokenizer, const env::EmbodiedPrompt& prompt);
  // Throws std::logic_error when static-dynamic and `prompt` is not the one last observed.
  KeepHouseholdPrompt assemble(const Tokenizer& tokenizer, const env::EmbodiedPrompt& prompt,
                               int64_t max_segments) const;

  const HouseholdGrouping& grouping() const { return grouping_; }
  int64_t embeddings_computed() const { return static_cast<int64_t>(embeddings_.size()); }

 private:
  HouseholdGrouping grouping_;
  SegmentEmbedder embed_;
  MemoryGrouping machine_;
  std::map<std::pair<std::string, int64_t>, Embedding> embeddings_;  // (key, version)
};

// The segments grouping (every segment its own unit), stateless.
KeepHouseholdPrompt assemble_household_prompt(const Tokenizer& tokenizer,
                                              const env::EmbodiedPrompt& prompt,
                                              int64_t max_segments);

}  // namespace engram::cli
