// A Kineto (PyTorch profiler) trace of a stretch of engram-cli's work: every ATen op on the
// host and every kernel and copy on the GPU, written as a Chrome trace (chrome://tracing,
// Perfetto). For finding where a benchmark's device time goes when the GPU machine has no
// Nsight Systems. CUDA builds only: elsewhere the constructor throws.
#pragma once

#include <memory>
#include <string>

namespace engram::cli {

class TorchProfile {
 public:
  explicit TorchProfile(std::string path);  // starts profiling
  ~TorchProfile();                          // stops and writes the trace (errors are logged)
  TorchProfile(const TorchProfile&) = delete;
  TorchProfile& operator=(const TorchProfile&) = delete;

 private:
  std::string path_;
};

}  // namespace engram::cli
