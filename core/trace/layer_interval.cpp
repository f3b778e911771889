#include "core/trace/layer_interval.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace engram {

const char* lane_name(TraceLane lane) {
  return lane == TraceLane::kCopy ? "copy" : "compute";
}

std::string to_json_line(const LayerInterval& i) {
  nlohmann::json j = {{"request", i.request},   {"phase", i.phase},          {"step", i.step},
                      {"layer", i.layer},       {"lane", lane_name(i.lane)}, {"what", i.what},
                      {"start_us", i.start_us}, {"end_us", i.end_us},        {"bytes", i.bytes},
                      {"tokens", i.tokens},     {"device", i.device},        {"clock", i.clock}};
  return j.dump();
}

LayerInterval parse_json_line(const std::string& line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("trace line is not JSON: ") + e.what());
  }
  try {
    LayerInterval i;
    i.request = j.at("request").get<int64_t>();
    i.phase = j.at("phase").get<std::string>();
    i.step = j.value("step", int64_t{0});
    i.layer = j.at("layer").get<int64_t>();
    const std::string lane = j.at("lane").get<std::string>();
    if (lane != "compute" && lane != "copy") throw std::invalid_argument("lane '" + lane + "'");
    i.lane = lane == "copy" ? TraceLane::kCopy : TraceLane::kCompute;
    i.what = j.at("what").get<std::string>();
    i.start_us = j.at("start_us").get<double>();
    i.end_us = j.at("end_us").get<double>();
    i.bytes = j.value("bytes", int64_t{0});
    i.tokens = j.value("tokens", int64_t{0});
    i.device = j.value("device", std::string());
    i.clock = j.value("clock", std::string());
    return i;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("trace line lacks a field: ") + e.what());
  }
}

}  // namespace engram
