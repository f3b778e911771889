#include "core/policies/recompute_policy.h"

#include <map>
#include <stdexcept>

#include "core/policies/cacheblend_recompute.h"
#include "core/policies/keep_recompute.h"
#include "core/policies/recompute_baselines.h"

namespace engram {
namespace {

std::map<std::string, std::string> parse_options(const std::string& spec, std::string* name) {
  const auto colon = spec.find(':');
  *name = spec.substr(0, colon);
  std::map<std::string, std::string> options;
  if (colon == std::string::npos) return options;
  size_t at = colon + 1;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("recompute policy '" + spec + "': expected key=value, got '" +
                                  item + "'");
    options[item.substr(0, eq)] = item.substr(eq + 1);
    at = comma + 1;
  }
  return options;
}

double number(const std::string& spec, const std::string& key, const std::string& value, double lo,
              double hi) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || v < lo || v > hi)
    throw std::invalid_argument("recompute policy '" + spec + "': " + key +
                                " must be a number in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + value + "'");
  return v;
}

void refuse_unknown(const std::string& spec, const std::map<std::string, std::string>& options,
                    const std::string& known) {
  for (const auto& [key, value] : options)
    if (known.find("," + key + ",") == std::string::npos)
      throw std::invalid_argument("recompute policy '" + spec + "': unknown key '" + key +
                                  "' (known: " + known.substr(1, known.size() - 2) + ")");
}

}  // namespace

double RecomputePlan::mean_recompute_ratio(const AssembledLayout& layout) const {
  const auto unit_rows = static_cast<double>(layout.unit_tokens());
  if (rows.size() < 2 || unit_rows <= 0) return rows.empty() ? 0.0 : 1.0;
  double sum = 0;
  for (size_t l = 1; l < rows.size(); ++l) {
    int64_t counted = 0;
    for (int64_t r : rows[l])
      counted += layout.unit_of_row(r) >= 0 ? 1 : 0;
    sum += static_cast<double>(counted) / unit_rows;
  }
  return sum / static_cast<double>(rows.size() - 1);
}

std::vector<std::string> recompute_policy_names() {
  return {"full-recompute", "prefix-cache", "full-reuse", "cacheblend", "keep"};
}

std::unique_ptr<RecomputePolicy> make_recompute_policy(const std::string& spec) {
  std::string name;
  const auto options = parse_options(spec, &name);
  if (name == "full-recompute" || name == "prefix-cache" || name == "full-reuse") {
    refuse_unknown(spec, options, ",");
    if (name == "full-recompute") return std::make_unique<FullRecompute>();
    if (name == "prefix-cache") return std::make_unique<PrefixCache>();
    return std::make_unique<FullReuse>();
  }
  if (name == "cacheblend") {
    refuse_unknown(spec, options, ",ratio,");
    const double ratio =
        options.count("ratio") ? number(spec, "ratio", options.at("ratio"), 0, 1) : 0.15;
    return std::make_unique<CacheBlendRecompute>(ratio);
  }
  if (name == "keep") {
    refuse_unknown(spec, options, ",mean,decay,schedule,iterations,score,probe,");
    KeepRecomputeOptions o;
    if (options.count("score")) {
      const std::string& v = options.at("score");
      if (v != "mass" && v != "density")
        throw std::invalid_argument("recompute policy '" + spec +
                                    "': score must be mass or density");
      o.per_token = v == "density";
    }
    if (options.count("schedule")) {
      const std::string& s = options.at("schedule");
      if (s == "decreasing") {
        o.schedule.kind = RecomputeRatioSchedule::Kind::kDecreasing;
      } else if (s == "constant") {
        o.schedule.kind = RecomputeRatioSchedule::Kind::kConstant;
      } else if (s == "code") {
        o.schedule.kind = RecomputeRatioSchedule::Kind::kKeepCode;
        o.schedule.decay = 0.95;
      } else {
        throw std::invalid_argument("recompute policy '" + spec +
                                    "': schedule must be decreasing, constant or code");
      }
    }
    if (options.count("mean")) o.schedule.mean = number(spec, "mean", options.at("mean"), 0, 1);
    if (options.count("decay"))
      o.schedule.decay = number(spec, "decay", options.at("decay"), 0.01, 1);
    if (options.count("iterations"))
      o.importance.max_iterations =
          static_cast<int>(number(spec, "iterations", options.at("iterations"), 1, 1000));
    if (options.count("probe"))
      o.probe_rows = static_cast<int64_t>(number(spec, "probe", options.at("probe"), 0, 1e6));
    return std::make_unique<KeepRecompute>(o);
  }
  throw std::invalid_argument("unknown recompute policy '" + name +
                              "' (known: full-recompute, prefix-cache, full-reuse, cacheblend, "
                              "keep)");
}

}  // namespace engram
