// Programmatic dependent launch (Hopper): a kernel launched with launch_dependent() may start
// while the kernel before it on the stream is still running, once every block of that one has
// called allow_dependents() (or exited). It must call wait_for_previous() before it reads
// anything the previous kernel writes and before it writes anything; what it may do earlier is
// read memory no kernel writes (weights) and prefetch. In the recorded decode step this hides
// the gap between kernels and each GEMV's ramp: the next projection's weights start streaming
// during the previous kernel's tail. CUDA graphs keep the relation as a programmatic edge.
// Without the launch attribute (or before sm_90) both device calls do nothing.
// ENGRAM_NO_PDL=1 in the environment launches normally (the benchmark's peer).
#pragma once

#include <cuda_runtime.h>

#include "gpu/env_flag.h"

namespace engram::gpu {

__device__ inline void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ inline void wait_for_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The L2 line holding p, fetched ahead (no register, no wait).
__device__ inline void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Whether launches ask for the overlap: off with ENGRAM_NO_PDL=1, and off for the rest of the
// process once a driver refused the attribute (the kernels are correct either way).
inline bool& dependent_launch_enabled() {
  static bool on = !env_flag("ENGRAM_NO_PDL");
  return on;
}

// kernel<<<grid, block, shared, stream>>>(args...), allowed to overlap the previous kernel.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                             cudaStream_t stream, const Args&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
  if (err != cudaErrorNotSupported && err != cudaErrorInvalidValue) return err;
  if (config.numAttrs == 0) return err;
  // Refused with the attribute (an older driver, a capture mode without programmatic edges):
  // clear the error and launch plainly from now on.
  (void)cudaGetLastError();
  dependent_launch_enabled() = false;
  config.numAttrs = 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace engram::gpu
