// zeroshard-bench step / netstep: the whole training step of one CPU worker.
//
// step: tokens/s of one worker (StepEngine, BF16, ZeRO-3, 1 in-process shard
// server) on T=256, 8 blocks, 8 heads, width 512, vocab 256, batch 4, and the
// matrix-product FLOP/s achieved over the whole step (StepMatmulFlops /
// step seconds) against the rate of the GEMM the kernels use, measured in
// the same run (bench/gemm_rate.h: BF16 2048x1024x2048). Last line:
//   step ratio=<step FLOP/s / GEMM FLOP/s> target=0.6      (higher is better)
//
// netstep: the same model and data, networked step time (2 in-process
// servers, 1 worker) against the in-process LocalTrainer (local FP32 Adam,
// no servers, no collectives), three alternating rounds, fastest step of
// each side (medians printed too). Last line:
//   netstep ratio=<networked / in-process> target=1.15      (lower is better)
//
// Args: [timed steps, default 3] [layers] [width] [fp32|bf16: netstep's
// communication_data_type] — one warm-up step runs first; the fastest timed
// step is the figure (medians printed too).
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/engine_rig.h"
#include "bench/gemm_rate.h"
#include "tests/support/local_trainer.h"

namespace zeroshard::bench {
namespace {

struct Shape {
  GptShape gpt{.layers = 8, .heads = 8, .width = 512, .vocab = 256,
               .context = 256};
  int batch = 4;
  int steps = 3;
};

Shape ParseArgs(const std::vector<std::string>& args) {
  Shape s;
  if (Smoke()) {
    s.gpt = {.layers = 1, .heads = 2, .width = 64, .vocab = 256, .context = 32};
    s.batch = 1;
    s.steps = 1;
  }
  if (args.size() > 0) s.steps = std::max(1, std::atoi(args[0].c_str()));
  if (args.size() > 1) s.gpt.layers = std::max(1, std::atoi(args[1].c_str()));
  if (args.size() > 2) s.gpt.width = std::max(64, std::atoi(args[2].c_str()));
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median of `field` over steps[first...] (first = 1 skips the warm-up).
template <typename T>
double MedianOf(const std::vector<StepResult>& steps, T field,
                size_t first = 1) {
  std::vector<double> v;
  for (size_t i = first; i < steps.size(); ++i) v.push_back(steps[i].*field);
  return Median(v);
}

const StepResult& Fastest(const std::vector<StepResult>& steps) {
  return *std::min_element(steps.begin(), steps.end(),
                           [](const StepResult& a, const StepResult& b) {
                             return a.seconds < b.seconds;
                           });
}

void PrintShape(const Shape& s, const char* what) {
  std::printf("%s: GPT T=%d layers=%d heads=%d width=%d vocab=%d batch=%d, "
              "bf16, ZeRO-3, %d timed steps after 1 warm-up\n",
              what, s.gpt.context, s.gpt.layers, s.gpt.heads, s.gpt.width,
              s.gpt.vocab, s.batch, s.steps);
}

int RunStep(const std::vector<std::string>& args) {
  const Shape s = ParseArgs(args);
  PrintShape(s, "step");
  // Warm-up, the timed steps, and a last one that is not counted (it starts
  // no fetch for a next step during its commit, so it would time short).
  auto cfg = BenchConfig(s.gpt, "bf16", 3, 1, 1, s.batch, s.steps + 2);
  auto sampler = cfg.ok() ? BenchSampler(*cfg)
                          : absl::StatusOr<BatchSampler>(cfg.status());
  if (!sampler.ok()) {
    std::fprintf(stderr, "setup: %s\n", sampler.status().ToString().c_str());
    return 1;
  }
  const double gemm = MeasureBlasGemmFlops();
  auto run = RunEngineRig(*cfg, *sampler);
  if (!run.ok()) {
    std::fprintf(stderr, "step: %s\n", run.status().ToString().c_str());
    return 1;
  }
  // The fastest timed step, as the GEMM reference is its best of 5.
  const std::vector<StepResult> timed(run->steps.begin() + 1,
                                      run->steps.end() - 1);
  const StepResult& best = Fastest(timed);
  const double sec = best.seconds;
  const double compute = best.compute_seconds;
  const double tokens = static_cast<double>(s.batch) * s.gpt.context;
  const double flops = StepMatmulFlops(s.gpt, s.gpt.context, tokens);
  std::printf("step time          %8.3f s  (fetch %.3f, forward+backward %.3f, "
              "comm wait %.3f, commit %.3f), fastest; median %.3f s\n",
              sec, best.fetch_seconds, compute, best.comm_wait_seconds,
              best.commit_seconds, MedianOf(timed, &StepResult::seconds, 0));
  std::printf("tokens/s           %8.0f\n", tokens / sec);
  std::printf("matmul FLOP/step   %8.2f GFLOP (linear + attention + head, "
              "fwd+bwd)\n", flops / 1e9);
  std::printf("step GEMM rate     %8.1f GFLOP/s over the whole step, %.1f over "
              "forward+backward\n", flops / sec / 1e9, flops / compute / 1e9);
  std::printf("GEMM peak          %8.1f GFLOP/s (BF16 2048x1024x2048, same "
              "run)\n", gemm / 1e9);
  std::printf("loss               %8.4f -> %.4f\n", run->steps.front().loss,
              run->steps.back().loss);
  std::printf("step ratio=%.3f target=0.6\n",
              gemm > 0 ? flops / sec / gemm : 0.0);
  return 0;
}

int RunNetStep(const std::vector<std::string>& args) {
  const Shape s = ParseArgs(args);
  PrintShape(s, "netstep");
  auto cfg = BenchConfig(s.gpt, "bf16", 3, 2, 1, s.batch, s.steps + 1);
  // Optional 4th argument: the push's communication_data_type (fp32|bf16).
  if (cfg.ok() && args.size() > 3 && args[3] == "bf16") {
    cfg->communication_data_type = CommDataType::kBf16;
  }
  if (cfg.ok()) {
    std::printf("gradients pushed as %s (communication_data_type)\n",
                CommDataTypeName(cfg->communication_data_type));
  }
  auto sampler = cfg.ok() ? BenchSampler(*cfg)
                          : absl::StatusOr<BatchSampler>(cfg.status());
  if (!sampler.ok()) {
    std::fprintf(stderr, "setup: %s\n", sampler.status().ToString().c_str());
    return 1;
  }
  // In-process (LocalTrainer, on its own thread as the engine's compute
  // is) and networked runs alternate for three rounds; each side reports its
  // fastest step, which is the most robust figure on a shared machine.
  auto local = LocalTrainer::Create(*cfg, &*sampler);
  if (!local.ok()) {
    std::fprintf(stderr, "local: %s\n", local.status().ToString().c_str());
    return 1;
  }
  std::vector<StepResult> local_steps, net_steps;
  uint64_t next = 0;
  for (int round = 0; round < 3; ++round) {
    absl::Status local_status;
    std::thread([&] {
      for (int i = 0; i <= s.steps; ++i) {
        auto r = (*local)->Step(next++);
        if (!r.ok()) {
          local_status = r.status();
          return;
        }
        if (i > 0) local_steps.push_back(*r);
      }
    }).join();
    if (!local_status.ok()) {
      std::fprintf(stderr, "local: %s\n", local_status.ToString().c_str());
      return 1;
    }
    // One step more than timed: a run's last step starts no fetch for a
    // next one during its commit, so it would time short; it is not counted.
    TrainingConfig net_cfg = *cfg;
    ++net_cfg.cluster.steps;
    auto run = RunEngineRig(net_cfg, *sampler);
    if (!run.ok()) {
      std::fprintf(stderr, "netstep: %s\n", run.status().ToString().c_str());
      return 1;
    }
    net_steps.insert(net_steps.end(), run->steps.begin() + 1,
                     run->steps.end() - 1);
  }
  const StepResult& lb = Fastest(local_steps);
  const StepResult& nb = Fastest(net_steps);
  const double net = nb.seconds, in_process = lb.seconds;
  std::printf("in-process step    %8.3f s  (forward+backward %.3f, Adam %.3f)"
              "  fastest of %zu\n",
              in_process, lb.compute_seconds, lb.commit_seconds,
              local_steps.size());
  std::printf("networked step     %8.3f s  (fetch %.3f, forward+backward %.3f, "
              "comm wait %.3f, commit %.3f), 2 servers x 1 worker, fastest of "
              "%zu\n",
              net, nb.fetch_seconds, nb.compute_seconds, nb.comm_wait_seconds,
              nb.commit_seconds, net_steps.size());
  std::printf("median             in-process %.3f s, networked %.3f s\n",
              MedianOf(local_steps, &StepResult::seconds, 0),
              MedianOf(net_steps, &StepResult::seconds, 0));
  std::printf("loss at step %d     in-process %.5f, networked %.5f\n",
              s.steps, local_steps[s.steps - 1].loss,
              net_steps[s.steps - 1].loss);
  std::printf("networked / in-process step time (lower is better)\n");
  std::printf("netstep ratio=%.3f target=1.15\n",
              in_process > 0 ? net / in_process : 0.0);
  return 0;
}

ZS_REGISTER_BENCH("step",
                  "one CPU worker's step: tokens/s and GEMM FLOP/s vs the "
                  "BLAS rate",
                  RunStep);
ZS_REGISTER_BENCH("netstep",
                  "networked step (2 servers, 1 worker) vs in-process "
                  "LocalTrainer step",
                  RunNetStep);

}  // namespace
}  // namespace zeroshard::bench
