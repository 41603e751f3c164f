// The step engine on a CUDA device (CUDA builds; skips without a GPU and
// says so): the CUDA model with the engine's units, partition and
// gradients in device memory, trained against in-process shard servers,
// gives the weights of the CPU model within the noise of a different
// summation order (FP32) or of BF16 roundings taken at different points
// (BF16). Two workers join NCCL on device buffers when the machine has two
// devices. The engine's schedule itself (fences, zeroing, copies) is
// checked bit for bit on the CPU by engine_model_memory_test.
#include <atomic>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/cuda_device.h"
#include "tests/worker/engine/engine_checks.h"
#include "tests/worker/engine/engine_cluster.h"
#include "model/cuda/device_gpt.h"

namespace zeroshard::testing {
namespace {

ModelFactory DeviceModel(int device) {
  return [device](const FlatLayout& layout, const GptShape& shape, DType dtype,
                  const model::CheckpointPolicy& policy)
             -> absl::StatusOr<std::unique_ptr<model::UnitModel>> {
    absl::StatusOr<std::unique_ptr<model::DeviceGptModel>> m =
        model::DeviceGptModel::Create(layout, shape, dtype, policy, device);
    if (!m.ok()) return m.status();
    return std::unique_ptr<model::UnitModel>(*std::move(m));
  };
}

// Trains `knobs` on the CPU and on devices 0..workers-1, compares.
void CompareWithCpu(const TinyKnobs& knobs, int workers, double rel,
                    double max_lr) {
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(knobs, 2, workers));
  ASSERT_OK_AND_ASSIGN(ClusterResult cpu, RunCluster(cfg));
  TrainOptions options;
  options.model_for_rank = [](int rank) { return DeviceModel(rank); };
  options.backend = workers > 1 ? "nccl" : "gloo";
  std::atomic<int> in_device_memory{0};
  options.on_step = [&](int, const StepEngine& engine, const StepResult&) {
    if (engine.units_in_model_memory()) in_device_memory.fetch_add(1);
  };
  ASSERT_OK_AND_ASSIGN(ClusterResult dev, RunCluster(cfg, options));
  EXPECT_EQ(in_device_memory.load(),
            static_cast<int>(cfg.cluster.steps) * workers);
  ExpectTrained(dev, cfg, "device");
  ExpectClose(cpu.weights, dev.weights, cfg, "device vs cpu", rel, max_lr);
  for (size_t s = 0; s < cpu.ranks[0].steps.size(); ++s) {
    EXPECT_NEAR(dev.ranks[0].steps[s].loss, cpu.ranks[0].steps[s].loss,
                knobs.precision == "bf16" ? 2e-2 : 1e-4)
        << "step " << s;
  }
}

TEST(EngineDeviceTest, OneWorkerFp32MatchesTheCpuModel) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  for (int stage : {1, 3}) {
    SCOPED_TRACE(stage);
    TinyKnobs k;
    k.stage = stage;
    k.micro_batch_size = 4;  // 2 micro-batches
    CompareWithCpu(k, 1, 1e-3, 0.5);
  }
}

TEST(EngineDeviceTest, OneWorkerBf16WithCheckpointing) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  TinyKnobs k;
  k.precision = "bf16";
  k.checkpointing = "every_block";
  // BF16 roundings of the activations differ by an ulp here and there, and
  // Adam turns a near-zero gradient's sign into a whole lr per step.
  CompareWithCpu(k, 1, 0.1, 6.0);
}

TEST(EngineDeviceTest, TwoWorkersOverNccl) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    GTEST_SKIP() << "one CUDA device: NCCL needs a device per rank";
  }
  TinyKnobs k;
  k.micro_batch_size = 2;
  CompareWithCpu(k, 2, 1e-3, 0.5);
}

}  // namespace
}  // namespace zeroshard::testing
