// An observer that appends every layer interval (and every retrieval map) to a JSON-lines file
// (`--trace FILE`).
#pragma once

#include <filesystem>
#include <fstream>

#include "core/trace/engine_observer.h"

namespace engram {

class TraceFileWriter : public EngineObserver {
 public:
  // Truncates the file; throws std::runtime_error when it cannot be opened.
  explicit TraceFileWriter(const std::filesystem::path& path);
  void on_layer_interval(const LayerInterval& interval) override;
  void on_retrieval_map(const RetrievalMap& map) override;

 private:
  std::ofstream out_;
};

}  // namespace engram
