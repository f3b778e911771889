#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
using Embedding = std::vector<float>;
double d1(const Embedding& a, const Embedding& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]) - b[i];
    d += x * x;
  }
  return d;
}
double d8(const Embedding& a, const Embedding& b) {
  double p[8] = {};
  const size_t n = a.size(), m = n / 8 * 8;
  for (size_t i = 0; i < m; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double x = static_cast<double>(a[i + j]) - b[i + j];
      p[j] += x * x;
    }
  double d = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  for (size_t i = m; i < n; ++i) {
    const double x = static_cast<double>(a[i]) - b[i];
    d += x * x;
  }
  return d;
}
int main() {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<Embedding> x(1329, Embedding(3072));
  for (auto& v : x)
    for (auto& f : v)
      f = nd(rng);
  std::vector<Embedding> c(4, Embedding(3072));
  for (auto& v : c)
    for (auto& f : v)
      f = nd(rng);
  for (auto fn : {d1, d8}) {
    auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    for (int it = 0; it < 10; ++it)
      for (auto& v : x)
        for (auto& cc : c)
          s += fn(v, cc);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        10;
    std::printf("%.3f ms per Lloyd assignment pass (sum %.6e)\n", ms, s);
  }
}
