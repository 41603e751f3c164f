#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench/bench.h"

namespace zeroshard::bench {

double MeasureTriadBytesPerSecond(size_t bytes_per_array, int threads,
                                  int reps) {
  const size_t n = bytes_per_array / sizeof(double);
  threads = std::max(threads, 1);
  std::vector<double> a(n), b(n), c(n);
  // First touch by the thread that will use each part (NUMA-friendly).
  auto run = [&](auto&& body) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        body(lo, hi);
      });
    }
    for (auto& th : pool) th.join();
  };
  run([&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      a[i] = 0.0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
  });
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run([&](size_t lo, size_t hi) {
      const double s = 3.0;
      double* __restrict pa = a.data();
      const double* __restrict pb = b.data();
      const double* __restrict pc = c.data();
      for (size_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::max(best, 3.0 * n * sizeof(double) / sec);
  }
  return best;
}

}  // namespace zeroshard::bench
