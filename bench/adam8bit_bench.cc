// zeroshard-bench adam8bit: params/s of the servers' 8-bit AdamW step (the
// AdamW8bit rule's UpdateParts on tasks of 16 blocks of 2048, as
// ShardStore hands them to its threads) on >= 100M parameters, against
// this machine's memory bound measured in the same run, as `adam` does.
//
// Bytes per parameter: the step reads master (4), the m and v codes (2)
// and the gradient (2 B BF16 / 4 B FP32) and writes master (4), the codes
// (2) and the BF16 mirror (2, plus 2 for the read its store allocates);
// the scales are 16 B per 2048 elements. 18 / 20 B per parameter; the bound
// is triad STREAM bytes/s * 32/24 (write-allocate counted) / those bytes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "common/dtype.h"
#include "common/optimizer_config.h"
#include "optim/optimizer_pool.h"
#include "optim/quant8.h"
#include "optim/update_rule.h"

namespace zeroshard::bench {
namespace {

int RunAdam8bit(const std::vector<std::string>& args) {
  UpdateArgs parsed;
  if (!ParseUpdateArgs(args, "adam8bit", &parsed)) return 2;
  const uint64_t n = parsed.n;
  const bool bf16 = parsed.bf16;
  const int reps = parsed.reps;
  const size_t triad_bytes = Smoke() ? size_t{8} << 20 : size_t{512} << 20;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t blocks = Q8Blocks(n);
  float* master = AllocHugeArray<float>(n, "adam8bit");
  uint8_t* m = AllocHugeArray<uint8_t>(n, "adam8bit");
  uint8_t* v = AllocHugeArray<uint8_t>(n, "adam8bit");
  float* m_max = AllocHugeArray<float>(blocks, "adam8bit");
  float* v_max = AllocHugeArray<float>(blocks, "adam8bit");
  uint16_t* mirror = AllocHugeArray<uint16_t>(n, "adam8bit");
  float* g32 = bf16 ? nullptr : AllocHugeArray<float>(n, "adam8bit");
  uint16_t* g16 = bf16 ? AllocHugeArray<uint16_t>(n, "adam8bit") : nullptr;
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    master[i] = x;
    m[i] = ZeroCode(Quant8Map::kSigned);
    v[i] = ZeroCode(Quant8Map::kUnsigned);
    mirror[i] = 0;
    if (bf16) g16[i] = FloatToBf16(x * 1e-2f); else g32[i] = x * 1e-2f;
  }
  for (uint64_t b = 0; b < blocks; ++b) m_max[b] = v_max[b] = 0.0f;
  OptimizerConfig config;
  config.kind = OptimizerKind::kAdamW8bit;
  const UpdateRule& rule = UpdateRuleFor(config.kind);
  OptimizerPool pool(threads);
  constexpr uint64_t kTask = 16 * kQ8SlotBlock;  // ShardStore's task size
  const uint64_t tasks = (n + kTask - 1) / kTask;
  std::atomic<bool> failed{false};
  auto step_all = [&](uint64_t t) {
    const AdamStep step = rule.MakeStep(config, t, 1.0f, 0.1, 1.0);
    pool.ParallelFor(tasks, 1, [&](size_t lo, size_t hi) {
      for (size_t k = lo; k < hi; ++k) {
        const uint64_t at = k * kTask, len = std::min(kTask, n - at);
        StateSlice s{.master = master + at, .mirror = mirror + at, .n = len};
        s.codes[0] = m + at;
        s.codes[1] = v + at;
        s.absmax[0] = m_max + at / kQ8SlotBlock;
        s.absmax[1] = v_max + at / kQ8SlotBlock;
        const GradView g = bf16 ? GradView::Bf16(g16 + at) : GradView::Fp32(g32 + at);
        const RulePart part{step, g, 0, len};
        if (!rule.UpdateParts({&part, 1}, s).ok()) failed = true;
      }
    });
  };
  step_all(1);  // warm-up, and the state is no longer zero
  double best = 1e30, triad_stream = 0;
  uint64_t t = 2;
  for (int r = 0; r < reps; ++r) {
    triad_stream = std::max(
        triad_stream, MeasureTriadBytesPerSecond(triad_bytes, threads, 2));
    for (int k = 0; k < 2; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      step_all(t++);
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (failed) {
    std::fprintf(stderr, "adam8bit: a step was refused\n");
    return 1;
  }
  const double bytes = bf16 ? 18.0 : 20.0;
  const double dram = triad_stream * 32.0 / 24.0;
  const double rate = static_cast<double>(n) / best;
  const double bound = dram / bytes;
  std::printf("adam8bit: %llu params, %s gradient, %d threads: %.3f G params/s "
              "(%.1f ms a step, %.1f GB/s moved at %.0f B per param); triad "
              "%.1f GB/s (%.1f with write-allocate) -> bound %.2f G params/s\n",
              static_cast<unsigned long long>(n), bf16 ? "BF16" : "FP32",
              threads, rate / 1e9, best * 1e3, rate * bytes / 1e9, bytes,
              triad_stream / 1e9, dram / 1e9, bound / 1e9);
  std::printf("adam8bit ratio=%.2f target=0.5\n", rate / bound);
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("adam8bit",
                  "the servers' 8-bit AdamW step params/s vs triad bandwidth / "
                  "bytes per param [--n=100000000] [--grad=bf16|fp32] [--reps=5]",
                  RunAdam8bit);

}  // namespace zeroshard::bench
