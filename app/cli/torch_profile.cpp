#include "app/cli/torch_profile.h"

#include <spdlog/spdlog.h>

#include <stdexcept>

#ifdef ENGRAM_WITH_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace engram::cli {

#ifdef ENGRAM_WITH_CUDA
namespace profiler = torch::autograd::profiler;

TorchProfile::TorchProfile(std::string path) : path_(std::move(path)) {
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO);
  const std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU,
                                                    profiler::ActivityType::CUDA};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
}

TorchProfile::~TorchProfile() {
  try {
    profiler::disableProfiler()->save(path_);
    spdlog::info("profile written to {}", path_);
  } catch (const std::exception& e) {
    spdlog::error("profile {}: {}", path_, e.what());
  }
}
#else
TorchProfile::TorchProfile(std::string path) : path_(std::move(path)) {
  throw std::runtime_error("--profile needs a CUDA build of engram-cli (PyTorch's Kineto)");
}

TorchProfile::~TorchProfile() = default;
#endif

}  // namespace engram::cli
