#include "bench/gemm_rate.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "model/kernels/cpu/gemm.h"

namespace zeroshard::bench {

double MeasureGemmFlops(int64_t m, int64_t n, int64_t k, DType dtype, int reps) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  std::vector<uint16_t> ah, bh;
  const void* pa = a.data();
  const void* pb = b.data();
  if (dtype == DType::kBf16) {
    ah.resize(a.size());
    bh.resize(b.size());
    FloatToBf16Array(a.data(), ah.data(), a.size());
    FloatToBf16Array(b.data(), bh.data(), b.size());
    pa = ah.data();
    pb = bh.data();
  }
  kernels::cpu::GemmDesc g{.m = m, .n = n, .k = k, .a = {pa, dtype, k, false},
                           .b = {pb, dtype, n, false}, .c = c.data(), .ldc = n};
  if (!kernels::cpu::Gemm(g).ok()) return 0;
  double best = 1e30;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!kernels::cpu::Gemm(g).ok()) return 0;
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * m * n * k / best;
}

double MeasureBlasGemmFlops() {
  return MeasureGemmFlops(2048, 2048, 1024, DType::kBf16, 5);
}

}  // namespace zeroshard::bench
