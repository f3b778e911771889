#include "gpu/device_info.h"

#include <torch/version.h>

#include <fstream>

#ifdef ENGRAM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace engram::gpu {

DeviceInfo device_info(at::Device device) {
  DeviceInfo info;
  info.torch_version = TORCH_VERSION;
#ifdef ENGRAM_WITH_CUDA
  if (device.is_cuda()) {
    const cudaDeviceProp* p =
        at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
    info.name = p->name;
    info.memory_bytes = static_cast<int64_t>(p->totalGlobalMem);
    return info;
  }
#endif
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      info.name = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (info.name.empty()) info.name = "cpu";
  return info;
}

void synchronize(at::Device device) {
#ifdef ENGRAM_WITH_CUDA
  if (device.is_cuda()) at::cuda::getCurrentCUDAStream(device.index()).synchronize();
#endif
  (void)device;
}

namespace {

int64_t allocated(at::Device device, bool peak) {
#ifdef ENGRAM_WITH_CUDA
  if (device.is_cuda()) {
    // [0]: the aggregate over small and large pools (the StatType enum moved between versions).
    const auto stats =
        c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    const auto& bytes = stats.allocated_bytes[0];
    return static_cast<int64_t>(peak ? bytes.peak : bytes.current);
  }
#endif
  (void)device;
  (void)peak;
  return -1;
}

}  // namespace

int64_t allocated_bytes(at::Device device) {
  return allocated(device, /*peak=*/false);
}

int64_t peak_allocated_bytes(at::Device device) {
  return allocated(device, /*peak=*/true);
}

void reset_peak_allocated(at::Device device) {
#ifdef ENGRAM_WITH_CUDA
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
  (void)device;
}

}  // namespace engram::gpu
