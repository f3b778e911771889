#include "core/trace/retrieval_map.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace engram {
namespace {

constexpr const char* kKey = "retrieval_map";

}  // namespace

std::string to_json_line(const RetrievalMap& map) {
  nlohmann::json retrievals = nlohmann::json::array();
  for (const auto& r : map.retrievals)
    retrievals.push_back({r.step, r.layer, r.rows, r.units});
  const auto floats = [](const std::vector<float>& values) {
    nlohmann::json out = nlohmann::json::array();
    for (float v : values) {
      if (std::isnan(v)) {
        out.push_back(nullptr);
      } else {
        out.push_back(v);
      }
    }
    return out;
  };
  nlohmann::json similarity = floats(map.similarity);
  nlohmann::json body = {{"request", map.request},
                         {"policy", map.policy},
                         {"layers", map.layers},
                         {"full_layers", map.full_layers},
                         {"kv_heads", map.kv_heads},
                         {"budget", map.budget},
                         {"tau", map.tau},
                         {"steps", map.steps},
                         {"retrievals", std::move(retrievals)},
                         {"similarity", std::move(similarity)}};
  if (!map.threshold.empty()) {
    // Written up to the last step (a map's last step may not have set its layers yet).
    std::vector<float> thresholds = map.threshold;
    thresholds.resize(map.similarity.size(), std::nanf(""));
    body["threshold"] = floats(thresholds);
  }
  return nlohmann::json{{kKey, std::move(body)}}.dump();
}

bool is_retrieval_map_line(const std::string& line) {
  static const std::string prefix = std::string("{\"") + kKey + "\"";
  const size_t start = line.find_first_not_of(" \t");
  return start != std::string::npos && line.compare(start, prefix.size(), prefix) == 0;
}

RetrievalMap parse_retrieval_map(const std::string& line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("retrieval map line is not JSON: ") + e.what());
  }
  RetrievalMap m;
  try {
    const nlohmann::json& b = j.at(kKey);
    m.request = b.at("request").get<int64_t>();
    m.policy = b.value("policy", std::string());
    m.layers = b.at("layers").get<int64_t>();
    m.full_layers = b.value("full_layers", int64_t{0});
    m.kv_heads = b.value("kv_heads", int64_t{0});
    m.budget = b.value("budget", int64_t{0});
    m.tau = b.value("tau", -1.0);
    m.steps = b.at("steps").get<int64_t>();
    for (const auto& r : b.at("retrievals")) {
      if (!r.is_array() || r.size() != 4)
        throw std::invalid_argument("a retrieval is not 4 numbers");
      m.retrievals.push_back(
          {r[0].get<int64_t>(), r[1].get<int64_t>(), r[2].get<int64_t>(), r[3].get<int64_t>()});
    }
    for (const auto& s : b.at("similarity")) {
      m.similarity.push_back(s.is_null() ? std::nanf("") : s.get<float>());
    }
    if (b.contains("threshold")) {
      for (const auto& t : b.at("threshold"))
        m.threshold.push_back(t.is_null() ? std::nanf("") : t.get<float>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("retrieval map lacks a field: ") + e.what());
  }
  if (m.layers <= 0 || m.layers > 4096 || m.steps < 0 || m.full_layers < 0 ||
      m.full_layers > m.layers) {
    throw std::invalid_argument("retrieval map: bad layer or step counts");
  }
  // Compared by division: a hostile step count must not overflow into a match.
  const auto values = static_cast<int64_t>(m.similarity.size());
  if (values % m.layers != 0 || values / m.layers != m.steps) {
    throw std::invalid_argument("retrieval map: " + std::to_string(m.similarity.size()) +
                                " similarities for " + std::to_string(m.steps) + " steps of " +
                                std::to_string(m.layers) + " layers");
  }
  if (!m.threshold.empty() && m.threshold.size() != m.similarity.size()) {
    throw std::invalid_argument("retrieval map: " + std::to_string(m.threshold.size()) +
                                " thresholds for " + std::to_string(m.similarity.size()) +
                                " similarities");
  }
  for (const auto& r : m.retrievals) {
    if (r.step < 0 || r.step >= m.steps || r.layer < 0 || r.layer >= m.layers) {
      throw std::invalid_argument("retrieval map: a retrieval at step " + std::to_string(r.step) +
                                  ", layer " + std::to_string(r.layer) + " lies outside the map");
    }
  }
  return m;
}

}  // namespace engram
