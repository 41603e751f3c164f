// zeroshard-bench lion: params/s of LionUpdate (the SIMD, multi-threaded
// path, optim/lion.h) on >= 100M parameters against this machine's memory
// bound measured in the same run, as `adam` does for AdamW.
//
// Bytes per parameter: the update reads master and m (8 B) and the gradient
// (2 B BF16 / 4 B FP32) and writes master and m (8 B, their lines already
// read) and the BF16 mirror (2 B, plus 2 B for the read its store allocates:
// Lion's kernel does not stream it). 20 / 22 B per parameter; the bound is
// triad STREAM bytes/s * 32/24 (write-allocate counted) / those bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "common/dtype.h"
#include "common/optimizer_config.h"
#include "optim/lion.h"

namespace zeroshard::bench {
namespace {

int RunLion(const std::vector<std::string>& args) {
  UpdateArgs parsed;
  if (!ParseUpdateArgs(args, "lion", &parsed)) return 2;
  const uint64_t n = parsed.n;
  const bool bf16 = parsed.bf16;
  const int reps = parsed.reps;
  const size_t triad_bytes = Smoke() ? size_t{8} << 20 : size_t{512} << 20;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  float* master = AllocHugeArray<float>(n, "lion");
  float* m = AllocHugeArray<float>(n, "lion");
  uint16_t* mirror = AllocHugeArray<uint16_t>(n, "lion");
  float* g32 = bf16 ? nullptr : AllocHugeArray<float>(n, "lion");
  uint16_t* g16 = bf16 ? AllocHugeArray<uint16_t>(n, "lion") : nullptr;
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    master[i] = x;
    m[i] = 0.0f;
    mirror[i] = 0;
    if (bf16) g16[i] = FloatToBf16(x * 1e-2f); else g32[i] = x * 1e-2f;
  }
  OptimizerConfig config;
  config.kind = OptimizerKind::kLion;
  config.lr = 1e-4;
  config.beta2 = 0.99;
  const LionSlice slice{master, m, mirror, n};
  const GradView grad = bf16 ? GradView::Bf16(g16) : GradView::Fp32(g32);
  LionUpdate(MakeLionStep(config, 1, 1.0f, 0.1, 1.0), grad, slice);  // warm-up
  double best = 1e30, triad_stream = 0;
  uint64_t t = 2;
  for (int r = 0; r < reps; ++r) {
    triad_stream = std::max(
        triad_stream, MeasureTriadBytesPerSecond(triad_bytes, threads, 2));
    for (int k = 0; k < 2; ++k) {
      const AdamStep step = MakeLionStep(config, t++, 1.0f, 0.1, 1.0);
      const auto t0 = std::chrono::steady_clock::now();
      LionUpdate(step, grad, slice);
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - t0).count());
    }
  }
  const double bytes = bf16 ? 22.0 : 24.0;
  const double dram = triad_stream * 32.0 / 24.0;
  const double rate = static_cast<double>(n) / best;
  const double bound = dram / bytes;
  std::printf("lion: %llu params, %s gradient, kernel %s, %d threads: "
              "%.2f G params/s (%.1f ms a step, %.1f GB/s moved at %.0f B "
              "per param); triad %.1f GB/s (%.1f with write-allocate) -> "
              "bound %.2f G params/s\n",
              static_cast<unsigned long long>(n), bf16 ? "BF16" : "FP32",
              std::string(LionKernelName()).c_str(), threads, rate / 1e9,
              best * 1e3, rate * bytes / 1e9, bytes, triad_stream / 1e9,
              dram / 1e9, bound / 1e9);
  std::printf("lion ratio=%.2f target=0.8\n", rate / bound);
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("lion",
                  "LionUpdate params/s vs triad bandwidth / bytes per param "
                  "[--n=100000000] [--grad=bf16|fp32] [--reps=5]",
                  RunLion);

}  // namespace zeroshard::bench
