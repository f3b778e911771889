// The trace of selective recomputation that the importance-propagation panel reads (issue 16,
// "Panel"): per planning step, the assembled units, each layer's recompute set, the
// importance-propagation rounds that chose the next layer's set, and the unit attention they
// were computed from (the edges). Written by `engram-cli eval keep --trace FILE`, read by
// ui/importance_panel.h. Tensor-free and Qt-free: only the executed plan
// (recompute_policy.h) and the layout it ran on.
//
// Layer i of a step holds R_i (the units recomputed there), the unit attention measured at i,
// and the hops that chose R_{i+1} from it; the last layer has neither.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/policies/assembled_layout.h"
#include "core/policies/recompute_policy.h"

namespace engram {

// NOTE: written to disk; a change of meaning bumps kRecomputeTraceVersion.
inline constexpr const char* kRecomputeTraceFormat = "engram-recompute-trace";
inline constexpr int kRecomputeTraceVersion = 1;

// What the caller knows about a unit that the layout does not: where it came from.
struct TraceUnitInfo {
  std::string key;    // the memory segment's (or group's) key
  std::string kind;   // "object", "example", "agent", ...
  std::string label;  // readable text, cut to kTraceLabelChars
  std::string group;  // "static" | "dynamic" (KEEP §4.1 groups) | "segment" (ungrouped)
  int64_t members = 1;
};
inline constexpr size_t kTraceLabelChars = 60;

struct TraceUnit {
  int64_t index = 0;  // layout unit index (UnitSpan::unit)
  std::string key;
  std::string kind;
  std::string label;
  std::string group;
  int64_t members = 1;
  int64_t begin = 0;  // first row in the assembled prompt
  int64_t tokens = 0;
};

struct TraceLayer {
  int64_t layer = 0;
  std::vector<int64_t> units;       // recomputed here (any row), ascending unit indices
  std::vector<int64_t> unit_rows;   // rows recomputed per entry of `units` (< tokens: CacheBlend)
  bool query = true;                // the query rows are recomputed (the runner requires it)
  int64_t rows = 0;                 // all rows recomputed
  std::vector<ImportanceHop> hops;  // the rounds that chose the next layer's units (KEEP)
  UnitAttention attention;          // measured here; empty when the policy did not ask
};

struct TraceStep {
  int64_t step = 0;     // the planning step (the evaluation's state index)
  int64_t episode = 0;  // the episode it belongs to
  std::string method;   // the policy's name
  std::string spec;     // its full spec
  int64_t prefix_tokens = 0;
  int64_t query_tokens = 0;
  int64_t total_tokens = 0;
  std::vector<TraceUnit> units;  // prompt order
  std::vector<TraceLayer> layers;
};

struct RecomputeTrace {
  std::string model;
  std::vector<TraceStep> steps;
};

// One step from the layout a prefill ran on and its executed plan; `units` is indexed by
// UnitSpan::unit. Throws std::invalid_argument when `units` does not cover the layout or the
// plan's per-layer lists disagree in length.
TraceStep make_trace_step(const AssembledLayout& layout, const RecomputePlan& plan,
                          const std::vector<TraceUnitInfo>& units);

// `text` on one line (newlines and tabs as spaces), at most kTraceLabelChars bytes, never cut
// inside a UTF-8 sequence.
std::string trace_label(const std::string& text);

void to_json(nlohmann::json& j, const RecomputeTrace& trace);
// Throws std::runtime_error naming the JSON path of a missing or mistyped field.
void from_json(const nlohmann::json& j, RecomputeTrace& trace);

// Crash-safe: a temporary file beside `path`, fsynced and renamed over it (storage/durable_file.h).
// Throws storage::StoreError (a std::runtime_error) naming the file.
void write_recompute_trace(const std::filesystem::path& path, const RecomputeTrace& trace);
// Throws std::runtime_error naming the file and what is wrong (unreadable, not JSON with the
// byte offset, another format or version, a field missing or of the wrong type).
RecomputeTrace read_recompute_trace(const std::filesystem::path& path);

}  // namespace engram
