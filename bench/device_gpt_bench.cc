// zeroshard-bench device-gpt (CUDA builds; on a GPU machine): the GPT-2-124M
// shape (12 layers, 12 heads, width 768, context 1024) in BF16 on one GPU,
// with the vocabulary padded from 50257 to 50304 (= 393 x 128) as llm.c
// does: with 50257 every row of the logits and their gradient is 2- or
// 4-byte aligned and cuBLASLt falls back to slow kernels for the three
// largest products of the step. `--vocab=50257` measures the unpadded one.
//
// 1. The model alone: forward + backward of the CUDA model
//    (model/cuda/device_gpt.h) with its parameters and gradients in
//    device memory, no checkpointing, with the default attention (the
//    probabilities kept, products on cuBLASLt), then the online-softmax
//    kernels (--attention=online, FP32 SIMT) and the flash kernels
//    (--attention=flash, tensor cores); tokens/s and model FLOP utilization
//    (matrix-product FLOPs of the step, bench/engine_rig.h's
//    StepMatmulFlops, over the time) against two peaks measured or known in
//    the same run: this device's own cuBLASLt BF16 rate on 8192^3 products,
//    and the vendor's dense BF16 figure where the device is one we know.
//    Peak activation bytes against the estimator's (model/memory_estimate).
//    Then one step with every op marked on the stream (OpTimer): each op's
//    milliseconds and share, so a device run shows which kernel to work on.
// 2. The whole step: 1 worker (the CUDA model, parameters staged from the
//    host per unit, the faster attention of 1.) + 1 in-process server,
//    ZeRO-3, with the server's state on the host (its AdamW on the CPU),
//    then on the device (--placement=device); tokens/s and MFU of the
//    median step.
//
//   zeroshard-bench device-gpt [--batch=8] [--steps=4] [--layers=12]
//                              [--vocab=50304]
//
// Ends with "device-gpt ratio=MFU target=0.40" (the model alone with the
// faster of the probs and flash attentions, against the vendor peak when
// known, else the measured GEMM rate).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "bench/bench.h"
#include "bench/engine_rig.h"
#include "common/dtype.h"
#include "common/init_values.h"
#include "model/memory_estimate.h"
#include "server/device_transfer.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/op_timer.h"
#include "model/cuda/device_gpt.h"
#include "model/gpt_forward_backward.h"

namespace zeroshard::bench {
namespace {

// Dense BF16 tensor FLOP/s the vendor states (no sparsity), by device name.
double VendorBf16Peak(const std::string& name) {
  struct Known {
    const char* match;
    double flops;
  } known[] = {{"H200", 989e12}, {"H100 SXM", 989e12}, {"H100 80GB HBM3", 989e12},
               {"H100 PCIe", 756e12}, {"H100", 756e12}, {"A100", 312e12},
               {"L40S", 362e12}};
  for (const Known& k : known) {
    if (absl::StrContains(name, k.match)) return k.flops;
  }
  return 0;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// cuBLASLt BF16 products [n,n] x [n,n] -> FP32, best of 5: FLOP/s.
double MeasureDeviceGemm(int64_t n) {
  auto gemm = kernels::cuda::CublasLtGemm::Create();
  if (!gemm.ok()) return 0;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  if (cudaMalloc(&a, n * n * 2) != cudaSuccess ||
      cudaMalloc(&b, n * n * 2) != cudaSuccess ||
      cudaMalloc(&c, n * n * 4) != cudaSuccess) {
    return 0;
  }
  cudaMemset(a, 0x3c, n * n * 2);
  cudaMemset(b, 0x3c, n * n * 2);
  const kernels::GemmDesc g{.m = n, .n = n, .k = n,
                            .a = {a, DType::kBf16, n}, .b = {b, DType::kBf16, n},
                            .c = static_cast<float*>(c), .ldc = n};
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    if (!(*gemm)->Run(g, nullptr).ok()) return 0;
    cudaDeviceSynchronize();
    if (r > 0) best = std::min(best, Seconds(t0));
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * n / best;
}

int Flag(const std::vector<std::string>& args, const char* name, int def) {
  const std::string prefix = std::string("--") + name + "=";
  for (const std::string& a : args) {
    int v = 0;
    if (a.rfind(prefix, 0) == 0 && absl::SimpleAtoi(a.substr(prefix.size()), &v)) {
      return v;
    }
  }
  return def;
}

// The whole step: 1 worker + 1 in-process server (one run per server
// placement), `model` the worker's model, timed as the engine reports it.
// False when a run could not be set up; a run that fails is reported and
// the next placement goes on.
bool WholeStepRuns(const GptShape& shape, int B, int steps,
                   const ModelFactory& model, const char* attention,
                   const std::vector<Placement>& placements, double flops,
                   double peak, double est_state) {
  bool all_ran = true;
  const double tokens_per_step = double(B) * shape.context;
  for (const Placement placement : placements) {
    auto cfg = BenchConfig(shape, "bf16", 3, 1, 1, B, steps + 1);
    if (!cfg.ok()) {
      std::printf("device-gpt: %s\n", cfg.status().ToString().c_str());
      return false;
    }
    cfg->cluster.placement = placement;
    auto sampler = BenchSampler(*cfg);
    if (!sampler.ok()) {
      std::printf("device-gpt: %s\n", sampler.status().ToString().c_str());
      return false;
    }
    auto run = RunEngineRig(*cfg, *sampler, nullptr, model);
    if (!run.ok()) {
      std::printf("step, server %s: %s\n", PlacementName(placement),
                  run.status().ToString().c_str());
      all_ran = false;
      continue;
    }
    // The median step (the first, with no fetch overlapped, left out) and
    // its parts: fetch (what the previous commit's overlap left), compute,
    // the wait for the comm thread, commit.
    std::vector<const StepResult*> by_time;
    for (size_t i = 1; i < run->steps.size(); ++i) {
      by_time.push_back(&run->steps[i]);
    }
    std::sort(by_time.begin(), by_time.end(),
              [](const StepResult* a, const StepResult* b) {
                return a->seconds < b->seconds;
              });
    const StepResult* mid =
        by_time.empty() ? nullptr : by_time[by_time.size() / 2];
    const double med = mid == nullptr ? 0 : mid->seconds;
    std::printf("step, 1 worker + 1 server (%s, %s attention): %.3f s/step, "
                "%.0f tokens/s, MFU %.1f%%, loss %.3f -> %.3f\n",
                PlacementName(placement), attention, med,
                tokens_per_step / med,
                100 * flops / med / peak, run->steps.front().loss,
                run->steps.back().loss);
    if (mid != nullptr) {
      std::printf("  that step: fetch %.3f s, compute %.3f s, comm wait %.3f "
                  "s, commit %.3f s\n",
                  mid->fetch_seconds, mid->compute_seconds,
                  mid->comm_wait_seconds, mid->commit_seconds);
    }
    // The worker's model state at its peak (partition, its copy on the
    // device, unit and gradient buffers) against the estimator's terms.
    std::printf("  worker model state peak %.0f MiB (estimator %.0f MiB)\n",
                run->max_memory.total_peak() / 1048576.0,
                est_state / 1048576.0);
  }
  return all_ran;
}

int DeviceGpt(const std::vector<std::string>& args) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    if (Smoke()) {
      // The rehearsal and the test suite still run the whole-step rig the
      // device runs share, on the CPU model at a tiny shape.
      std::printf("no CUDA device: the whole-step runs on the CPU model\n");
      const GptShape tiny{.layers = 1, .heads = 2, .width = 64, .vocab = 256,
                          .context = 32};
      if (!WholeStepRuns(tiny, 1, 2, MakeCpuModel, "cpu", {Placement::kHost},
                         StepMatmulFlops(tiny, tiny.context, tiny.context),
                         1e12, 0)) {
        return 1;
      }
      std::printf("device-gpt ratio=0.00 target=0.40 (smoke, no device)\n");
      return NoDeviceExitCode();
    }
    std::printf("no CUDA device: nothing measured\n");
    return NoDeviceExitCode();
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const std::string name = prop.name;
  const GptShape shape{.layers = Flag(args, "layers", 12), .heads = 12,
                       .width = 768, .vocab = Flag(args, "vocab", 50304),
                       .context = 1024};
  const int B = Flag(args, "batch", 8), T = shape.context;
  const int steps = Flag(args, "steps", 4);
  const double vendor = VendorBf16Peak(name);
  const double gemm_rate = MeasureDeviceGemm(8192);
  std::printf("device: %s, %.1f GiB; cuBLASLt BF16 8192^3: %.0f TFLOP/s; "
              "vendor dense BF16: %s\n",
              name.c_str(), prop.totalGlobalMem / double(1 << 30),
              gemm_rate / 1e12,
              vendor > 0 ? std::to_string(vendor / 1e12).substr(0, 5).c_str()
                         : "unknown");
  const double peak = vendor > 0 ? vendor : gemm_rate;

  // 1. The model alone, device-resident.
  auto layout = FlatLayout::Create(*MakeGptManifest(shape, 1), 1, 1);
  if (!layout.ok()) {
    std::printf("device-gpt: %s\n", layout.status().ToString().c_str());
    return 1;
  }
  const size_t n = layout->total_elems();
  std::vector<float> init(n);
  FillInitialValues(*layout, 7, 0.02, {0, n}, init.data());
  std::vector<uint16_t> bf16(n);
  FloatToBf16Array(init.data(), bf16.data(), n);
  init.clear();
  init.shrink_to_fit();
  void* dparams = nullptr;
  float* dgrads = nullptr;
  if (cudaMalloc(&dparams, n * 2) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&dgrads), n * 4) != cudaSuccess) {
    std::printf("device-gpt: cannot allocate the parameters\n");
    return 1;
  }
  cudaMemcpy(dparams, bf16.data(), n * 2, cudaMemcpyHostToDevice);
  const model::CheckpointPolicy none{model::CheckpointMode::kNone};
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 7919) % shape.vocab;
    targets[i] = (i * 104729 + 1) % shape.vocab;
  }
  const model::GptBatch batch{B, T, tokens, targets};
  const double tokens_per_step = double(B) * T;
  const double flops = StepMatmulFlops(shape, T, tokens_per_step);
  EstimateInput in;
  in.model = shape;
  in.micro_batch = B;
  in.precision = Precision::kBf16;
  in.checkpointing = CheckpointPolicy::kNone;
  auto est = EstimateMemory(in);
  // The fastest of `steps` timed steps (after one warm-up) of the model with
  // `attention`; false after printing why when it could not run.
  struct Alone {
    double seconds = 1e30, loss = 0;
    int64_t act_peak = 0;
  };
  auto model_alone = [&](model::DeviceAttention attention, Alone* out) {
    size_t free0 = 0, free1 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    auto m = model::DeviceGptModel::Create(*layout, shape, DType::kBf16, none,
                                           0, attention);
    if (!m.ok()) {
      std::printf("device-gpt: %s\n", m.status().ToString().c_str());
      return false;
    }
    for (int s = 0; s < steps + 1; ++s) {
      cudaMemset(dgrads, 0, n * 4);
      cudaDeviceSynchronize();
      const auto t0 = std::chrono::steady_clock::now();
      auto r = model::GptForwardBackward(**m, *layout, dparams, batch, 1.0f,
                                         absl::Span<float>(dgrads, n));
      cudaDeviceSynchronize();
      if (!r.ok()) {
        std::printf("device-gpt: %s\n", r.status().ToString().c_str());
        return false;
      }
      if (s > 0) out->seconds = std::min(out->seconds, Seconds(t0));
      out->loss = r->loss;
      out->act_peak = std::max(out->act_peak, r->peak_activation_bytes);
    }
    cudaMemGetInfo(&free1, &total);
    // One more step with every op marked on the stream: where the time goes.
    kernels::cuda::OpTimer timer;
    (*m)->set_op_timer(&timer);
    cudaMemset(dgrads, 0, n * 4);
    cudaDeviceSynchronize();
    absl::StatusOr<std::vector<kernels::cuda::OpTime>> ops =
        absl::UnknownError("not run");
    if (absl::Status started = timer.Start((*m)->stream()); !started.ok()) {
      ops = started;
    } else {
      auto r = model::GptForwardBackward(**m, *layout, dparams, batch, 1.0f,
                                         absl::Span<float>(dgrads, n));
      if (r.ok()) {
        ops = timer.Finish();
      } else {
        ops = r.status();
      }
    }
    (*m)->set_op_timer(nullptr);
    const char* name = attention == model::DeviceAttention::kOnline ? "online"
                       : attention == model::DeviceAttention::kFlash ? "flash"
                                                                      : "probs";
    EstimateInput ain = in;
    ain.online_attention = attention != model::DeviceAttention::kProbs;
    auto aest = EstimateMemory(ain);
    const double est_act = aest.ok() ? aest->activations.chosen : 0;
    std::printf("model alone, %s attention (params %.1f M, batch %d x %d, no "
                "checkpointing): %.3f s/step, %.0f tokens/s, loss %.3f, MFU "
                "%.1f%% of %s (%.1f%% of the measured GEMM rate)\n",
                name, n / 1e6, B, T, out->seconds,
                tokens_per_step / out->seconds, out->loss,
                100 * flops / out->seconds / peak,
                vendor > 0 ? "the vendor peak" : "the measured GEMM rate",
                100 * flops / out->seconds / gemm_rate);
    std::printf("  peak activations %.0f MiB (estimator %.0f MiB); device "
                "memory used by the model %.0f MiB (workspace %.0f MiB)\n",
                out->act_peak / 1048576.0, est_act / 1048576.0,
                (double(free0) - double(free1)) / 1048576.0,
                (*m)->workspace_bytes() / 1048576.0);
    if (!ops.ok()) {
      std::printf("  op breakdown: %s\n", ops.status().ToString().c_str());
      return true;
    }
    double marked = 0;
    for (const kernels::cuda::OpTime& t : *ops) marked += t.ms;
    std::sort(ops->begin(), ops->end(),
              [](const auto& a, const auto& b) { return a.ms > b.ms; });
    std::printf("  op breakdown of one step (CUDA events between ops; %.2f ms "
                "marked, the untimed step %.2f ms):\n",
                marked, out->seconds * 1e3);
    for (const kernels::cuda::OpTime& t : *ops) {
      std::printf("    %-24s %8.3f ms %5.1f%% %5d calls\n", t.label.c_str(),
                  t.ms, 100 * t.ms / marked, t.calls);
    }
    return true;
  };
  std::printf("parameters and gradients on the device: %.0f MiB (6 B/param)\n",
              n * 6 / 1048576.0);
  Alone probs, online, flash;
  if (!model_alone(model::DeviceAttention::kProbs, &probs)) return 1;
  // The online kernels are FP32 SIMT: timed next to the default, which they
  // replace only where the probabilities would not fit.
  if (model_alone(model::DeviceAttention::kOnline, &online)) {
    std::printf("  online / probs: time x%.2f, activations x%.2f\n",
                online.seconds / probs.seconds,
                double(online.act_peak) / double(probs.act_peak));
  }
  // The flash kernels: the same recurrence with tensor-core products.
  const bool flash_ran = model_alone(model::DeviceAttention::kFlash, &flash);
  if (flash_ran) {
    std::printf("  flash / probs: time x%.2f, activations x%.2f\n",
                flash.seconds / probs.seconds,
                double(flash.act_peak) / double(probs.act_peak));
  }
  // Flash stands in for the default only when it trains the same loss: a
  // fast wrong kernel must not raise the ratio.
  const bool flash_agrees =
      flash_ran && std::isfinite(flash.loss) &&
      std::fabs(flash.loss - probs.loss) <= 2e-2 * std::fabs(probs.loss);
  if (flash_ran && !flash_agrees) {
    std::printf("  flash's loss %.4f is not probs' %.4f: not used\n",
                flash.loss, probs.loss);
  }
  const bool flash_best = flash_agrees && flash.seconds < probs.seconds;
  const double mfu =
      flops / (flash_best ? flash.seconds : probs.seconds) / peak;
  cudaFree(dparams);
  cudaFree(dgrads);

  // 2. The whole step: 1 worker + 1 in-process server, with the faster
  // attention of the model alone.
  const model::DeviceAttention best =
      flash_best ? model::DeviceAttention::kFlash : model::DeviceAttention::kProbs;
  const ModelFactory cuda_model =
      [best](const FlatLayout& l, const GptShape& s, DType dt,
             const model::CheckpointPolicy& p)
      -> absl::StatusOr<std::unique_ptr<model::UnitModel>> {
    auto dm = model::DeviceGptModel::Create(l, s, dt, p, 0, best);
    if (!dm.ok()) return dm.status();
    return std::unique_ptr<model::UnitModel>(*std::move(dm));
  };
  WholeStepRuns(shape, B, steps, cuda_model, flash_best ? "flash" : "probs",
                {Placement::kHost, Placement::kDevice}, flops, peak,
                est.ok() ? est->worker[2].model_state_bytes() : 0);
  std::printf("device-gpt: the ratio is the model alone with %s attention\n",
              flash_best ? "flash" : "probs");
  std::printf("device-gpt ratio=%.2f target=0.40\n", mfu);
  return 0;
}

ZS_REGISTER_BENCH("device-gpt",
                  "GPT-2-124M BF16 on one GPU: tokens/s, MFU, peak memory (GPU)",
                  DeviceGpt);

}  // namespace
}  // namespace zeroshard::bench
