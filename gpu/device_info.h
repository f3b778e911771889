// What benchmarks record about the machine: the device's name and memory.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace engram::gpu {

struct DeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3", or the CPU model
  int64_t memory_bytes = 0;
  std::string torch_version;
};

DeviceInfo device_info(at::Device device);
// Waits until the device has finished all work queued so far (a no-op on the CPU).
void synchronize(at::Device device);
// Bytes of live tensors the CUDA caching allocator holds on `device` now, or at their peak since
// reset_peak_allocated() (weights included); -1 off CUDA, where nothing counts them.
int64_t allocated_bytes(at::Device device);
int64_t peak_allocated_bytes(at::Device device);
void reset_peak_allocated(at::Device device);

}  // namespace engram::gpu
