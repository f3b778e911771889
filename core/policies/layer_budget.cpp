#include "core/policies/layer_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <sstream>

#include "storage/durable_file.h"

namespace engram {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw LayerCalibrationError("layer calibration " + source + ": " + what);
}

const json& field(const json& j, const char* key, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end()) bad(source, std::string("'") + key + "' is missing");
  return *it;
}

std::string text_field(const json& j, const char* key, const std::string& source) {
  const json& v = field(j, key, source);
  if (!v.is_string()) bad(source, std::string("'") + key + "' is not a string");
  return v.get<std::string>();
}

int64_t integer_field(const json& j, const char* key, const std::string& source, int64_t least) {
  const json& v = field(j, key, source);
  if (!v.is_number_integer()) bad(source, std::string("'") + key + "' is not an integer");
  const int64_t n = v.get<int64_t>();
  if (n < least)
    bad(source,
        std::string("'") + key + "' is " + std::to_string(n) + ", below " + std::to_string(least));
  return n;
}

double real_field(const json& j, const char* key, const std::string& source) {
  const json& v = field(j, key, source);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    bad(source, std::string("'") + key + "' is not a finite number");
  return v.get<double>();
}

// Largest remainder: the integer parts of `share` plus one for the largest fractions (ties to the
// lower index) until they sum to `total`.
std::vector<int64_t> round_to_total(const std::vector<double>& share, int64_t total) {
  const size_t n = share.size();
  std::vector<int64_t> out(n);
  std::vector<double> rest(n);
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<int64_t>(std::floor(share[i]));
    rest[i] = share[i] - static_cast<double>(out[i]);
    sum += out[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rest[a] > rest[b]; });
  // The deficit is below n in exact arithmetic; the loops only guard against rounding in `share`.
  for (size_t k = 0; sum < total; k = (k + 1) % n, ++sum)
    ++out[order[k]];
  for (size_t k = n - 1; sum > total; k = (k + n - 1) % n, --sum)
    --out[order[k]];
  return out;
}

std::string safe_file_name(const std::string& fingerprint) {
  std::string name = fingerprint;
  for (char& ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) ch = '_';
  }
  // No hidden or empty names.
  if (name.empty() || name.front() == '.') return std::string(1, '_').append(name);
  return name;
}

}  // namespace

std::vector<int64_t> allocate_layer_budgets(const std::vector<double>& key_cosine, int64_t budget,
                                            double alpha, int64_t ceiling) {
  if (key_cosine.empty()) throw std::invalid_argument("allocate_layer_budgets: no layers");
  if (budget < 1) throw std::invalid_argument("allocate_layer_budgets: budget must be at least 1");
  if (!std::isfinite(alpha) || alpha < 0)
    throw std::invalid_argument("allocate_layer_budgets: alpha must be finite and >= 0");
  if (ceiling != 0 && ceiling < budget)
    throw std::invalid_argument("allocate_layer_budgets: ceiling below the budget");
  const size_t layers = key_cosine.size();
  std::vector<double> weight(layers);
  for (size_t l = 0; l < layers; ++l) {
    if (!std::isfinite(key_cosine[l]))
      throw std::invalid_argument("allocate_layer_budgets: key cosine of layer " +
                                  std::to_string(l) + " is not finite");
    weight[l] = std::pow(std::max(0.0, 1.0 - key_cosine[l]), alpha);  // pow(0, 0) == 1
  }
  // Only ratios matter: scaled so that the largest is 1, and a weight too small to give a layer
  // anything above the floor at any sane λ counts as 0 (keeps floor/w finite for every α).
  const double heaviest = *std::max_element(weight.begin(), weight.end());
  if (heaviest > 0) {
    for (double& w : weight)
      w = w / heaviest < 1e-200 ? 0.0 : w / heaviest;
  }
  const double weight_sum = std::accumulate(weight.begin(), weight.end(), 0.0);
  const bool equal =
      std::all_of(weight.begin(), weight.end(), [&](double w) { return w == weight.front(); });
  if (equal || !(weight_sum > 0)) return std::vector<int64_t>(layers, budget);

  // share_l = clamp(λ·w_l, floor, ceiling) with λ such that the shares sum to L·M: Eq. 10 where
  // no bound binds, and what a bound adds or frees is spread over the others by their weights.
  // The sum is piecewise linear in λ with corners at floor/w_l and ceiling/w_l.
  const double total = static_cast<double>(layers) * static_cast<double>(budget);
  const double lo = static_cast<double>(budget / 4);
  const double hi = ceiling > 0 ? static_cast<double>(ceiling) : HUGE_VAL;
  const auto shares_at = [&](double lambda) {
    std::vector<double> share(layers);
    for (size_t l = 0; l < layers; ++l)
      share[l] = std::clamp(lambda * weight[l], lo, hi);
    return share;
  };
  const auto sum_at = [&](double lambda) {
    const std::vector<double> share = shares_at(lambda);
    return std::accumulate(share.begin(), share.end(), 0.0);
  };
  std::vector<double> corners = {0.0};
  for (size_t l = 0; l < layers; ++l) {
    if (weight[l] <= 0) continue;
    corners.push_back(lo / weight[l]);
    if (ceiling > 0) corners.push_back(hi / weight[l]);
  }
  std::sort(corners.begin(), corners.end());
  double lambda = corners.back();
  size_t k = 1;
  while (k < corners.size() && sum_at(corners[k]) < total)
    ++k;
  if (k < corners.size()) {
    const double a = corners[k - 1], b = corners[k];
    const double sa = sum_at(a), sb = sum_at(b);
    lambda = sb > sa ? a + (b - a) * (total - sa) / (sb - sa) : b;
  } else if (ceiling == 0) {
    lambda = corners.back() + (total - sum_at(corners.back())) / weight_sum;  // nothing binds
  }
  std::vector<double> share = shares_at(lambda);
  // Every weighted layer at the ceiling and still short: the unweighted layers take the rest.
  const double left = total - std::accumulate(share.begin(), share.end(), 0.0);
  const auto unweighted = std::count(weight.begin(), weight.end(), 0.0);
  if (left > 0.5 && unweighted > 0) {
    for (size_t l = 0; l < layers; ++l)
      if (weight[l] == 0) share[l] += left / static_cast<double>(unweighted);
  }
  return round_to_total(share, static_cast<int64_t>(layers) * budget);
}

std::string layer_calibration_to_json(const LayerCalibration& c) {
  nlohmann::ordered_json j;  // in this order in the file, for people reading it
  j["format"] = kLayerCalibrationFormat;
  j["version"] = kLayerCalibrationVersion;
  j["model_fingerprint"] = c.model_fingerprint;
  j["model_name"] = c.model_name;
  j["key_cosine"] = c.key_cosine;
  j["sink"] = c.sink;
  j["window"] = c.window;
  j["block"] = c.block;
  j["tokens"] = c.tokens;
  j["samples"] = c.samples;
  j["text"] = c.text;
  j["alpha"] = c.alpha;
  j["date"] = c.date;
  j["dtype"] = c.dtype;
  return j.dump(2) + "\n";
}

LayerCalibration layer_calibration_from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(source, std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad(source, "not a JSON object");
  if (text_field(j, "format", source) != kLayerCalibrationFormat)
    bad(source, std::string("'format' is not \"") + kLayerCalibrationFormat + "\"");
  const int64_t version = integer_field(j, "version", source, 1);
  if (version != kLayerCalibrationVersion)
    bad(source, "version " + std::to_string(version) + ", this build reads version " +
                    std::to_string(kLayerCalibrationVersion));
  LayerCalibration c;
  c.model_fingerprint = text_field(j, "model_fingerprint", source);
  if (c.model_fingerprint.empty()) bad(source, "'model_fingerprint' is empty");
  c.model_name = text_field(j, "model_name", source);
  const json& cos = field(j, "key_cosine", source);
  if (!cos.is_array() || cos.empty()) bad(source, "'key_cosine' is not a non-empty array");
  for (size_t l = 0; l < cos.size(); ++l) {
    const json& v = cos[l];
    // A cosine lies in [-1, 1]; a little over 1 is rounding.
    if (!v.is_number() || !std::isfinite(v.get<double>()) || std::abs(v.get<double>()) > 1.0 + 1e-6)
      bad(source, "'key_cosine[" + std::to_string(l) + "]' is not a cosine in [-1, 1]");
    c.key_cosine.push_back(v.get<double>());
  }
  c.sink = integer_field(j, "sink", source, 0);
  c.window = integer_field(j, "window", source, 0);
  c.block = integer_field(j, "block", source, 1);
  c.tokens = integer_field(j, "tokens", source, 1);
  c.samples = integer_field(j, "samples", source, 1);
  c.text = text_field(j, "text", source);
  c.alpha = real_field(j, "alpha", source);
  if (c.alpha < 0) bad(source, "'alpha' is negative");
  c.date = text_field(j, "date", source);
  c.dtype = text_field(j, "dtype", source);
  return c;
}

void write_layer_calibration(const std::filesystem::path& path, const LayerCalibration& c) {
  const std::filesystem::path final_path = std::filesystem::absolute(path);
  const std::filesystem::path dir = final_path.parent_path();
  if (std::filesystem::create_directories(dir)) {
    // The new directory's own entry must survive a crash too.
    storage::sync_directory(dir.parent_path(), "layer calibration");
  }
  std::filesystem::path temp = final_path;
  temp += ".tmp." + std::to_string(::getpid());
  storage::remove_file_quietly(temp);  // ours, left by a run of the same pid that died
  const std::string bytes = layer_calibration_to_json(c);
  storage::write_file_durably(
      temp, final_path,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      "layer calibration");
}

LayerCalibration read_layer_calibration(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path.string(), "cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) bad(path.string(), "cannot be read");
  return layer_calibration_from_json(buffer.str(), path.string());
}

LayerCalibration read_layer_calibration(const std::filesystem::path& path,
                                        const std::string& expected_fingerprint,
                                        int64_t num_layers) {
  LayerCalibration c = read_layer_calibration(path);
  if (c.model_fingerprint != expected_fingerprint)
    bad(path.string(), "made for model '" + c.model_name + "' (fingerprint " + c.model_fingerprint +
                           "), not this one (fingerprint " + expected_fingerprint +
                           "); run engram-cli calibrate --model DIR");
  if (static_cast<int64_t>(c.key_cosine.size()) != num_layers)
    bad(path.string(), std::to_string(c.key_cosine.size()) + " layers, the model has " +
                           std::to_string(num_layers));
  return c;
}

std::filesystem::path layer_calibration_path(const std::filesystem::path& profile_dir,
                                             const std::string& fingerprint) {
  return profile_dir / "calibration" / (safe_file_name(fingerprint) + ".json");
}

std::optional<LayerCalibration> find_layer_calibration(const std::filesystem::path& profile_dir,
                                                       const std::string& fingerprint,
                                                       int64_t num_layers) {
  const std::filesystem::path path = layer_calibration_path(profile_dir, fingerprint);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return read_layer_calibration(path, fingerprint, num_layers);
}

}  // namespace engram
