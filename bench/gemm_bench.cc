// zeroshard-bench gemm: the matrix-product rates behind the BLAS choice of
// model/kernels/cpu/gemm.h, measured in one run: oneDNN BF16 and FP32
// (the path the worker uses) against OpenBLAS cblas_sgemm (linked
// explicitly; Debian's OpenBLAS exports no cblas_sbgemm). Last line:
//   gemm ratio=<oneDNN BF16 / OpenBLAS FP32> target=1.0
// i.e. how much faster the chosen path is than the alternative (>= 1 keeps
// the choice).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <cblas.h>

#include "bench/bench.h"
#include "bench/gemm_rate.h"

namespace zeroshard::bench {
namespace {

double OpenBlasSgemmFlops(int m, int n, int k, int reps) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n),
      c(static_cast<size_t>(m) * n);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(),
                k, b.data(), n, 0.0f, c.data(), n);
  };
  run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * m * n * k / best;
}

int RunGemm(const std::vector<std::string>&) {
  const std::vector<std::array<int, 3>> shapes =
      Smoke() ? std::vector<std::array<int, 3>>{{128, 128, 128}}
              : std::vector<std::array<int, 3>>{
                    {1024, 2048, 512}, {1024, 512, 2048}, {2048, 2048, 1024}};
  const int reps = Smoke() ? 1 : 5;
  std::printf("%-18s %14s %14s %16s\n", "m x n x k", "oneDNN bf16", "oneDNN fp32",
              "OpenBLAS sgemm");
  double last_bf16 = 0, last_sgemm = 0;
  for (const auto& s : shapes) {
    const double bf = MeasureGemmFlops(s[0], s[1], s[2], DType::kBf16, reps);
    const double f32 = MeasureGemmFlops(s[0], s[1], s[2], DType::kFp32, reps);
    const double ob = OpenBlasSgemmFlops(s[0], s[1], s[2], reps);
    std::printf("%5d x %4d x %4d %10.1f GF/s %10.1f GF/s %12.1f GF/s\n", s[0], s[1],
                s[2], bf / 1e9, f32 / 1e9, ob / 1e9);
    last_bf16 = bf;
    last_sgemm = ob;
  }
  const double ref = MeasureBlasGemmFlops();
  std::printf("MeasureBlasGemmFlops() = %.1f GFLOP/s (reference for step benchmarks)\n",
              ref / 1e9);
  std::printf("gemm ratio=%.2f target=1.0\n", last_sgemm > 0 ? last_bf16 / last_sgemm : 0.0);
  return 0;
}

ZS_REGISTER_BENCH("gemm", "matrix-product rates: oneDNN bf16/fp32 vs OpenBLAS sgemm", RunGemm);

}  // namespace
}  // namespace zeroshard::bench
