// A small seeded generator whose sequence is fixed by this file alone. std::mt19937 is portable
// but std::uniform_int_distribution is not (each standard library maps bits to ranges its own
// way), and the worlds must be identical for a seed on every platform: the seeds are the
// evaluation's held-out split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace engram::env {

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64();
  // Uniform in [0, n); n > 0. The modulo bias (< n / 2^64) is irrelevant at these sizes.
  uint64_t below(uint64_t n);
  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi);
  bool chance(double p);

  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[below(items.size())];
  }
  template <class T>
  void shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i > 1; --i)
      std::swap(items[i - 1], items[below(i)]);
  }

 private:
  uint64_t state_;
};

}  // namespace engram::env
