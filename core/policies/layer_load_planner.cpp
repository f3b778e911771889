#include "core/policies/layer_load_planner.h"

#include <algorithm>
#include <stdexcept>

namespace engram {

LayerLoading parse_layer_loading(const std::string& name) {
  if (name == "serial") return LayerLoading::kSerial;
  if (name == "naive") return LayerLoading::kNaive;
  if (name == "balanced") return LayerLoading::kBalanced;
  throw std::invalid_argument("unknown layer loading '" + name +
                              "' (known: serial, naive, balanced)");
}

std::string layer_loading_name(LayerLoading mode) {
  switch (mode) {
    case LayerLoading::kSerial:
      return "serial";
    case LayerLoading::kNaive:
      return "naive";
    case LayerLoading::kBalanced:
      return "balanced";
  }
  return "?";
}

LayerLoadPlanner::LayerLoadPlanner(LayerLoading mode, int64_t layers, int64_t units)
    : mode_(mode),
      layers_(layers),
      units_(units),
      dropped_(static_cast<size_t>(units), false),
      issued_(static_cast<size_t>(units * layers), false) {
  if (layers <= 0 || units < 0) throw std::invalid_argument("layer load planner: bad shape");
}

bool LayerLoadPlanner::issued(int64_t unit, int64_t layer) const {
  return issued_.at(static_cast<size_t>(unit * layers_ + layer));
}

void LayerLoadPlanner::take(int64_t unit, int64_t layer, std::vector<LayerLoadJob>& out) {
  if (layer >= layers_) return;
  auto slot = issued_.begin() + unit * layers_ + layer;
  if (*slot) return;
  *slot = true;
  out.push_back({unit, layer});
}

std::vector<LayerLoadJob> LayerLoadPlanner::due(int64_t layer, const std::vector<bool>& dropped,
                                                const std::vector<bool>& extra) {
  if (layer != current_ + 1 || layer >= layers_)
    throw std::logic_error("layer load planner: layer " + std::to_string(layer) + " out of order");
  if (static_cast<int64_t>(dropped.size()) != units_ ||
      (!extra.empty() && static_cast<int64_t>(extra.size()) != units_))
    throw std::logic_error("layer load planner: one flag per unit expected");
  for (int64_t u = 0; u < units_; ++u)
    if (dropped_[u] && !dropped[u])
      throw std::logic_error("layer load planner: unit " + std::to_string(u) +
                             " was dropped and is recomputed again at layer " +
                             std::to_string(layer));
  dropped_ = dropped;
  current_ = layer;
  std::vector<LayerLoadJob> out;
  for (int64_t u = 0; u < units_; ++u)
    if (dropped_[u] || (!extra.empty() && extra[u])) take(u, layer, out);
  return out;
}

std::vector<LayerLoadJob> LayerLoadPlanner::ahead(int64_t layer,
                                                  const std::vector<bool>& extra_next) {
  std::vector<LayerLoadJob> out;
  if (mode_ == LayerLoading::kSerial || layer != current_) return out;
  for (int64_t u = 0; u < units_; ++u)
    if (dropped_[u] || (!extra_next.empty() && extra_next.at(u))) take(u, layer + 1, out);
  return out;
}

std::vector<LayerLoadJob> LayerLoadPlanner::prefetch(int64_t layer) {
  std::vector<LayerLoadJob> out;
  if (mode_ != LayerLoading::kBalanced || layer != current_) return out;
  for (int64_t l = layer + 2; l < layers_ && out.empty(); ++l)
    for (int64_t u = 0; u < units_; ++u)
      if (dropped_[u]) take(u, l, out);
  return out;
}

bool LayerLoadPlanner::all_dropped() const {
  return std::all_of(dropped_.begin(), dropped_.end(), [](bool d) { return d; });
}

}  // namespace engram
