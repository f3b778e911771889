#include "app/cli/torch_profile.h"

#include <cstdio>
#include <stdexcept>

// Not spdlog here: the profiler's headers bring PyTorch's own fmt, which the system spdlog
// does not build against.
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
    std::fprintf(stderr, "profile written to %s\n", path_.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "profile %s: %s\n", path_.c_str(), e.what());
  }
}
#else
TorchProfile::TorchProfile(std::string path) : path_(std::move(path)) {
  throw std::runtime_error("--profile needs a CUDA build of engram-cli (PyTorch's Kineto)");
}

TorchProfile::~TorchProfile() = default;
#endif

}  // namespace engram::cli
