#include "core/runtime/cpu_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace engram {

void use_cpu_threads() {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware > 1) at::set_num_threads(static_cast<int>(std::min(hardware, 16U)));
}

}  // namespace engram
