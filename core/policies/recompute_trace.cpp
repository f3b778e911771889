#include "core/policies/recompute_trace.h"

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/policies/trace_json.h"

namespace engram {
namespace {

using nlohmann::json;
using namespace trace_json;

json attention_json(const UnitAttention& a) {
  return {{"units", a.units}, {"from_query", a.from_query}, {"from_unit", a.from_unit}};
}

UnitAttention attention_of(const json& j, const std::string& where) {
  UnitAttention a;
  a.units = integers_of(field(j, "units", where), where + ".units");
  a.from_query = numbers_of(field(j, "from_query", where), where + ".from_query");
  const json& rows = array_of(field(j, "from_unit", where), where + ".from_unit");
  for (size_t r = 0; r < rows.size(); ++r)
    a.from_unit.push_back(numbers_of(rows[r], where + ".from_unit[" + std::to_string(r) + "]"));
  const size_t n = a.units.size();
  if (a.from_query.size() != n || a.from_unit.size() != n)
    bad(where, "from_query and from_unit must have one entry per unit (" + std::to_string(n) + ")");
  for (const auto& row : a.from_unit)
    if (row.size() != n) bad(where + ".from_unit", "expected a square matrix");
  return a;
}

TraceUnit unit_of(const json& j, const std::string& where) {
  TraceUnit u;
  u.index = integer(j, "index", where);
  u.key = text(j, "key", where);
  u.kind = text(j, "kind", where);
  u.label = text(j, "label", where);
  u.group = text(j, "group", where);
  u.members = integer(j, "members", where);
  u.begin = integer(j, "begin", where);
  u.tokens = integer(j, "tokens", where);
  return u;
}

TraceLayer layer_of(const json& j, const std::string& where) {
  TraceLayer l;
  l.layer = integer(j, "layer", where);
  l.units = integers_of(field(j, "units", where), where + ".units");
  l.unit_rows = integers_of(field(j, "unit_rows", where), where + ".unit_rows");
  if (l.unit_rows.size() != l.units.size())
    bad(where + ".unit_rows", "expected one count per entry of units");
  l.query = boolean(j, "query", where);
  l.rows = integer(j, "rows", where);
  const json& hops = array_of(field(j, "hops", where), where + ".hops");
  for (size_t h = 0; h < hops.size(); ++h) {
    const std::string at = where + ".hops[" + std::to_string(h) + "]";
    ImportanceHop hop;
    hop.relevant = integers_of(field(hops[h], "relevant", at), at + ".relevant");
    hop.scores = numbers_of(field(hops[h], "scores", at), at + ".scores");
    l.hops.push_back(std::move(hop));
  }
  l.attention = attention_of(field(j, "attention", where), where + ".attention");
  return l;
}

TraceStep step_of(const json& j, const std::string& where) {
  TraceStep s;
  s.step = integer(j, "step", where);
  s.episode = integer(j, "episode", where);
  s.method = text(j, "method", where);
  s.spec = text(j, "spec", where);
  s.prefix_tokens = integer(j, "prefix_tokens", where);
  s.query_tokens = integer(j, "query_tokens", where);
  s.total_tokens = integer(j, "total_tokens", where);
  const json& units = array_of(field(j, "units", where), where + ".units");
  for (size_t u = 0; u < units.size(); ++u)
    s.units.push_back(unit_of(units[u], where + ".units[" + std::to_string(u) + "]"));
  const json& layers = array_of(field(j, "layers", where), where + ".layers");
  for (size_t l = 0; l < layers.size(); ++l)
    s.layers.push_back(layer_of(layers[l], where + ".layers[" + std::to_string(l) + "]"));
  return s;
}

}  // namespace

std::string trace_label(const std::string& text) {
  std::string line;
  for (char c : text)
    line += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  const size_t first = line.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  line = line.substr(first, line.find_last_not_of(' ') - first + 1);
  if (line.size() <= kTraceLabelChars) return line;
  size_t cut = kTraceLabelChars;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a UTF-8 sequence
  return line.substr(0, cut) + "…";
}

TraceStep make_trace_step(const AssembledLayout& layout, const RecomputePlan& plan,
                          const std::vector<TraceUnitInfo>& units) {
  const size_t layers = plan.rows.size();
  if (plan.hops.size() > layers || plan.attention.size() > layers)
    throw std::invalid_argument("recompute trace: the plan has more hop or attention layers (" +
                                std::to_string(plan.hops.size()) + ", " +
                                std::to_string(plan.attention.size()) + ") than row layers (" +
                                std::to_string(layers) + ")");
  TraceStep step;
  step.prefix_tokens = layout.prefix_tokens;
  step.query_tokens = layout.total - layout.query_begin;
  step.total_tokens = layout.total;
  for (const UnitSpan& span : layout.units) {
    if (span.unit < 0 || static_cast<size_t>(span.unit) >= units.size())
      throw std::invalid_argument("recompute trace: no unit information for unit " +
                                  std::to_string(span.unit) + " (" + std::to_string(units.size()) +
                                  " given)");
    const TraceUnitInfo& info = units[static_cast<size_t>(span.unit)];
    step.units.push_back({span.unit, info.key, info.kind, trace_label(info.label), info.group,
                          info.members, span.begin, span.tokens()});
  }
  for (size_t l = 0; l < layers; ++l) {
    TraceLayer layer;
    layer.layer = static_cast<int64_t>(l);
    layer.rows = static_cast<int64_t>(plan.rows[l].size());
    layer.query = false;
    std::map<int64_t, int64_t> per_unit;  // unit -> rows recomputed
    for (int64_t row : plan.rows[l]) {
      if (row >= layout.query_begin) layer.query = true;
      const int64_t u = layout.unit_of_row(row);
      if (u >= 0) ++per_unit[layout.units[static_cast<size_t>(u)].unit];
    }
    for (const auto& [u, n] : per_unit) {
      layer.units.push_back(u);
      layer.unit_rows.push_back(n);
    }
    if (l < plan.hops.size()) layer.hops = plan.hops[l];
    if (l < plan.attention.size()) layer.attention = plan.attention[l];
    step.layers.push_back(std::move(layer));
  }
  return step;
}

void to_json(nlohmann::json& j, const RecomputeTrace& trace) {
  json steps = json::array();
  for (const TraceStep& s : trace.steps) {
    json units = json::array();
    for (const TraceUnit& u : s.units)
      units.push_back({{"index", u.index},
                       {"key", u.key},
                       {"kind", u.kind},
                       {"label", u.label},
                       {"group", u.group},
                       {"members", u.members},
                       {"begin", u.begin},
                       {"tokens", u.tokens}});
    json layers = json::array();
    for (const TraceLayer& l : s.layers) {
      json hops = json::array();
      for (const ImportanceHop& h : l.hops)
        hops.push_back({{"relevant", h.relevant}, {"scores", h.scores}});
      layers.push_back({{"layer", l.layer},
                        {"units", l.units},
                        {"unit_rows", l.unit_rows},
                        {"query", l.query},
                        {"rows", l.rows},
                        {"hops", hops},
                        {"attention", attention_json(l.attention)}});
    }
    steps.push_back({{"step", s.step},
                     {"episode", s.episode},
                     {"method", s.method},
                     {"spec", s.spec},
                     {"prefix_tokens", s.prefix_tokens},
                     {"query_tokens", s.query_tokens},
                     {"total_tokens", s.total_tokens},
                     {"units", units},
                     {"layers", layers}});
  }
  j = {{"format", kRecomputeTraceFormat},
       {"version", kRecomputeTraceVersion},
       {"model", trace.model},
       {"steps", steps}};
}

void from_json(const nlohmann::json& j, RecomputeTrace& trace) {
  check_format(j, kRecomputeTraceFormat, kRecomputeTraceVersion);
  RecomputeTrace out;
  out.model = text(j, "model", "(top)");
  const json& steps = array_of(field(j, "steps", "(top)"), "steps");
  for (size_t s = 0; s < steps.size(); ++s)
    out.steps.push_back(step_of(steps[s], "steps[" + std::to_string(s) + "]"));
  trace = std::move(out);
}

void write_recompute_trace(const std::filesystem::path& path, const RecomputeTrace& trace) {
  write_json_file(path, json(trace), "recompute trace");
}

RecomputeTrace read_recompute_trace(const std::filesystem::path& path) {
  return read_json_as<RecomputeTrace>(path, "recompute trace");
}

}  // namespace engram
