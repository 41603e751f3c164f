// zeroshard-bench memory: a worker's peak model-state bytes
// (StepEngine::memory().total_peak(): its BF16 partition + FP32 grad shard
// + full units gathered at once + full-unit FP32 grad buffers) as depth
// grows 4 -> 8 -> 16 blocks at width 256 (T=32, batch 1, BF16, 1 server),
// under ZeRO-3 and, for contrast, ZeRO-1 (every unit and its full gradient
// resident).
//
// Two scalings are printed for each stage:
//   fixed N = 2 workers: the partition (6 bytes x params / N) grows with the
//     model, as it must; the working set (gathered units + unit grads)
//     is what ZeRO-3 keeps flat;
//   N = depth / 2 workers (weak scaling, params per worker about constant):
//     docs/DESIGN.md's 2Psi/N + 4Psi/N + ~2 units, the figure the target is about.
// Last line (lower is better):
//   memory ratio=<ZeRO-3 total_peak at 16 blocks / at 4 blocks, N = depth/2>
//   target=1.10
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/engine_rig.h"

namespace zeroshard::bench {
namespace {

double MiB(uint64_t b) { return b / 1048576.0; }

int RunMemory(const std::vector<std::string>&) {
  std::printf("worker model-state peak, GPT width 256, heads 4, T=32, vocab "
              "256, batch 1, bf16, 1 server, 1 step\n");
  std::printf("%-5s %-9s %6s %3s %12s %12s %12s %12s %12s\n", "stage",
              "scaling", "blocks", "N", "params(M)", "partition", "grad shard",
              "working set", "total MiB");
  double ratio = 0;
  const std::vector<int> depths =
      Smoke() ? std::vector<int>{2, 4} : std::vector<int>{4, 8, 16};
  const int width = Smoke() ? 64 : 256;
  for (int stage : {3, 1}) {
    for (const char* scaling : {"fixed N", "N=L/2"}) {
      const bool weak = scaling[0] == 'N';
      double first = 0;
      for (int layers : depths) {
        const GptShape shape{.layers = layers, .heads = 4, .width = width,
                             .vocab = 256, .context = 32};
        const int n = weak ? layers / 2 : 2;
        auto cfg = BenchConfig(shape, "bf16", stage, 1, n, 1, 1);
        auto sampler = cfg.ok() ? BenchSampler(*cfg)
                                : absl::StatusOr<BatchSampler>(cfg.status());
        auto run = sampler.ok() ? RunEngineRig(*cfg, *sampler)
                                : absl::StatusOr<RigRun>(sampler.status());
        if (!run.ok()) {
          std::fprintf(stderr, "memory: %s\n",
                       run.status().ToString().c_str());
          return 1;
        }
        const EngineMemory& m = run->max_memory;
        const uint64_t total = m.total_peak();
        if (layers == depths.front()) first = static_cast<double>(total);
        std::printf("%-5d %-9s %6d %3d %12.2f %12.2f %12.2f %12.2f %12.2f\n",
                    stage, scaling, layers, n, GptParamCount(shape) / 1e6,
                    MiB(m.partition_bytes), MiB(m.grad_shard_bytes),
                    MiB(m.unit_params_peak + m.unit_grads_peak), MiB(total));
        if (layers == depths.back()) {
          std::printf("      %-9s growth %d/%d blocks: %.3f\n", scaling,
                      depths.back(), depths.front(), total / first);
          if (stage == 3 && weak) ratio = total / first;
        }
      }
    }
  }
  std::printf("ZeRO-3 total peak growth 4 -> 16 blocks, N = depth/2 (lower is "
              "better)\n");
  std::printf("memory ratio=%.3f target=1.10\n", ratio);
  return 0;
}

ZS_REGISTER_BENCH("memory",
                  "worker model-state peak vs depth, ZeRO-3 and ZeRO-1",
                  RunMemory);

}  // namespace
}  // namespace zeroshard::bench
