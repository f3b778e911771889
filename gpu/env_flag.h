// Benchmark switches read from the environment once: a flag is on when set to exactly "1"
// (ENGRAM_CUBLAS_DECODE, ENGRAM_UNFUSED_DECODE, ENGRAM_NO_PDL, ENGRAM_TORCH_SCORES,
// ENGRAM_WARP_SCORES, ENGRAM_MASKED_RAGGED, ENGRAM_PROBED_WINDOW, ENGRAM_HOST_PLAN_LISTS,
// ENGRAM_DECODE_ATTENTION_INTERLEAVED, ENGRAM_DECODE_ATTENTION_G4: a peer measured by the same
// build). Callers on a hot path keep the answer in a static.
#pragma once

#include <cstdlib>
#include <cstring>

namespace engram::gpu {

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace engram::gpu
