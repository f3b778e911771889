#include "core/env/seeded_rng.h"

namespace engram::env {

// SplitMix64 (Steele, Lea, Flood 2014): one add and three mixes a draw, full period 2^64.
uint64_t SeededRng::next_u64() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SeededRng::below(uint64_t n) {
  return next_u64() % n;
}

int64_t SeededRng::between(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo + 1)));
}

bool SeededRng::chance(double p) {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53 < p;
}

}  // namespace engram::env
