// zeroshard-bench activation: peak activation memory and step time (forward
// + backward, BF16) of the GPT worker model for each checkpointing policy on
// one shape: T=256, 8 layers, 8 heads, width 512, batch 4, vocab 256.
//
// Peak activation bytes = GptModel::memory().peak(): block inputs, saved
// block internals, the residual stream and its gradient (transient FP32
// scratch of the op being computed is not counted). The last line is
//   activation ratio=<peak every_block / peak none> target=0.6
// i.e. the fraction of activation memory per-block checkpointing keeps;
// the target is the seed's "about half" with margin (lower is better).
// Args: [steps] (timed steps per policy, default 2).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "model/gpt_manifest.h"
#include "common/init_values.h"
#include "model/gpt_forward_backward.h"

namespace zeroshard::bench {
namespace {

using model::CheckpointMode;
using model::CheckpointPolicy;

int RunActivation(const std::vector<std::string>& args) {
  const int steps = Smoke() ? 1
                    : args.empty() ? 2
                                   : std::max(1, std::atoi(args[0].c_str()));
  const GptShape shape =
      Smoke() ? GptShape{.layers = 2, .heads = 2, .width = 64, .vocab = 256,
                         .context = 32}
              : GptShape{.layers = 8, .heads = 8, .width = 512, .vocab = 256,
                         .context = 256};
  const int B = Smoke() ? 1 : 4, T = shape.context;
  auto manifest = MakeGptManifest(shape, 1);
  auto layout = manifest.ok() ? FlatLayout::Create(*manifest, 1, 1)
                              : absl::StatusOr<FlatLayout>(manifest.status());
  if (!layout.ok()) {
    std::fprintf(stderr, "layout: %s\n", layout.status().ToString().c_str());
    return 1;
  }
  std::vector<float> init(layout->total_elems());
  FillInitialValues(*layout, 7, 0.02, {0, layout->total_elems()}, init.data());
  std::vector<uint16_t> params(init.size());
  FloatToBf16Array(init.data(), params.data(), init.size());
  std::vector<int32_t> tokens(B * T), targets(B * T);
  std::mt19937 rng(3);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % shape.vocab);
    targets[i] = static_cast<int32_t>(rng() % shape.vocab);
  }
  std::vector<float> grads(layout->total_elems());
  std::printf("GPT T=%d layers=%d heads=%d width=%d batch=%d vocab=%d, bf16, %d timed steps\n",
              T, shape.layers, shape.heads, shape.width, B, shape.vocab, steps);
  std::printf("%-12s %16s %12s %10s %10s %12s\n", "policy", "peak act MiB", "step s",
              "mem/none", "time/none", "tokens/s");
  const CheckpointPolicy policies[] = {{CheckpointMode::kNone},
                                       {CheckpointMode::kEveryBlock},
                                       {CheckpointMode::kEveryK, 2}};
  double none_mem = 0, none_time = 0, every_mem = 0;
  for (const CheckpointPolicy& p : policies) {
    int64_t peak = 0;
    double best = 1e30;
    for (int s = 0; s <= steps; ++s) {  // step 0 warms up
      std::fill(grads.begin(), grads.end(), 0.0f);
      const auto t0 = std::chrono::steady_clock::now();
      auto r = model::GptForwardBackward(*layout, shape, params.data(), DType::kBf16,
                                         {B, T, tokens, targets}, p, 1.0f,
                                         absl::MakeSpan(grads));
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", p.Name().c_str(), r.status().ToString().c_str());
        return 1;
      }
      peak = r->peak_activation_bytes;
      if (s > 0) best = std::min(best, dt);
    }
    if (p.mode == CheckpointMode::kNone) {
      none_mem = static_cast<double>(peak);
      none_time = best;
    }
    if (p.mode == CheckpointMode::kEveryBlock) every_mem = static_cast<double>(peak);
    std::printf("%-12s %16.1f %12.3f %10.3f %10.3f %12.0f\n", p.Name().c_str(),
                peak / 1048576.0, best, peak / none_mem, best / none_time, B * T / best);
  }
  std::printf("activation ratio=%.3f target=0.6\n", every_mem / none_mem);
  return 0;
}

ZS_REGISTER_BENCH("activation",
                  "GPT activation memory and step time per checkpointing policy",
                  RunActivation);

}  // namespace
}  // namespace zeroshard::bench
