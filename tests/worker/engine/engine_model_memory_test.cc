// The step engine's model-memory path (units, partition and full-unit
// gradients in the model's memory, StepEngine's header), run on the CPU
// against the stand-in of model_memory_stand_in.h: every schedule (one and
// two workers, ZeRO 1/2/3, accumulation, bf16, checkpointing) trains
// bit-identical weights to the host path, with every unit and gradient the
// model sees inside model memory, every gradient read only after its fence,
// every buffer freed once, and the bytes that cross the "bus" exactly the
// partition up and this worker's gradient part down.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/worker/engine/engine_checks.h"
#include "tests/worker/engine/engine_cluster.h"
#include "tests/worker/engine/model_memory_stand_in.h"

namespace zeroshard::testing {
namespace {

struct Case {
  int workers;
  int stage;
  int micro;  // micro_batch_size (train batch 8)
  std::string precision = "fp32";
  std::string checkpointing = "none";
};

std::string Name(const Case& c) {
  return absl::StrCat(c.workers, " workers, stage ", c.stage, ", micro ",
                      c.micro, ", ", c.precision, ", checkpointing ",
                      c.checkpointing);
}

void RunBoth(const Case& c) {
  SCOPED_TRACE(Name(c));
  TinyKnobs k;
  k.stage = c.stage;
  k.train_batch_size = 8;
  k.micro_batch_size = c.micro;
  k.precision = c.precision;
  k.checkpointing = c.checkpointing;
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(k, 2, c.workers));
  const int gas = cfg.gradient_accumulation_steps;

  ASSERT_OK_AND_ASSIGN(ClusterResult host, RunCluster(cfg));
  ExpectTrained(host, cfg, "host path");

  StandInRecord record;
  TrainOptions options;
  options.make_model = StandInModelFactory(&record);
  std::atomic<int> in_model_memory{0}, steps{0};
  std::atomic<uint64_t> shard_elems{0};
  options.on_step = [&](int, const StepEngine& engine, const StepResult&) {
    if (engine.units_in_model_memory()) in_model_memory.fetch_add(1);
    if (steps.fetch_add(1) < c.workers) {
      shard_elems.fetch_add(engine.grad_shard().size());
    }
  };
  ASSERT_OK_AND_ASSIGN(ClusterResult dev, RunCluster(cfg, options));
  EXPECT_EQ(in_model_memory.load(), steps.load());
  EXPECT_EQ(steps.load(), static_cast<int>(cfg.cluster.steps) * c.workers);
  const std::vector<std::string> violations = record.violations();
  EXPECT_TRUE(violations.empty()) << absl::StrJoin(violations, "; ");
  EXPECT_GT(record.model_calls(), 0u);
  EXPECT_GT(record.fence_waits(), 0u);
  // Fences and copies are bounded by the step timeout.
  EXPECT_EQ(record.timeout(), absl::Seconds(cfg.cluster.step_timeout_s));
  ExpectBitIdentical(host.weights, dev.weights, "model memory vs host");
  for (int r = 0; r < c.workers; ++r) {
    for (size_t s = 0; s < host.ranks[r].steps.size(); ++s) {
      EXPECT_EQ(host.ranks[r].steps[s].loss, dev.ranks[r].steps[s].loss);
      EXPECT_EQ(host.ranks[r].steps[s].grad_norm,
                dev.ranks[r].steps[s].grad_norm);
    }
  }
  // Up: each step's partition (its dtype); down: this worker's FP32 part
  // of every unit once per reduce-scatter (per micro-batch under ZeRO-2/3,
  // per step under ZeRO-1).
  const uint64_t step_count = cfg.cluster.steps;
  const uint64_t param_bytes = c.precision == "bf16" ? 2 : 4;
  EXPECT_EQ(record.bytes_to_model(),
            step_count * shard_elems.load() * param_bytes);
  EXPECT_EQ(record.bytes_from_model(),
            step_count * shard_elems.load() * sizeof(float) *
                (c.stage == 1 ? 1 : gas));
}

TEST(EngineModelMemory, OneWorkerEveryStage) {
  for (int stage : {1, 2, 3}) RunBoth({1, stage, 4});
}

TEST(EngineModelMemory, TwoWorkersEveryStageWithAccumulation) {
  for (int stage : {1, 2, 3}) RunBoth({2, stage, 2});
}

TEST(EngineModelMemory, Bf16WithCheckpointing) {
  RunBoth({2, 3, 2, "bf16", "every_block"});
  RunBoth({1, 2, 2, "bf16", "every_block"});
}

// A group that takes device buffers (as NCCL's does) and is never called:
// StepEngine::Create decides where units live before any collective runs.
class DeviceBufferGroup : public WorkerGroup {
 public:
  DeviceBufferGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend() const override { return "device-buffers"; }
  bool device_buffers() const override { return true; }
  absl::Status AllGather(absl::Span<const uint8_t>, absl::Span<uint8_t>) override {
    return Unexpected();
  }
  absl::Status AllGatherInPlace(absl::Span<uint8_t>) override { return Unexpected(); }
  absl::Status ReduceScatter(absl::Span<const float>, absl::Span<float>,
                             float) override {
    return Unexpected();
  }
  absl::Status Broadcast(std::string*, int) override { return Unexpected(); }
  absl::Status Barrier() override { return Unexpected(); }

 protected:
  absl::Status AllReduceHost(ReduceType, void*, size_t, ReduceOp) override {
    return Unexpected();
  }

 private:
  static absl::Status Unexpected() {
    ADD_FAILURE() << "a collective ran in StepEngine::Create";
    return absl::InternalError("not expected");
  }
  const int rank_, size_;
};

// A group on device buffers cannot serve a model that computes in host
// memory (the CPU model): Create refuses it rather than hand the group host
// pointers. A model with its own memory is accepted and keeps units there.
TEST(EngineModelMemory, DeviceBufferGroupNeedsAModelWithItsOwnMemory) {
  TinyKnobs k;
  k.stage = 3;
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(k, 2, 2));
  ASSERT_OK_AND_ASSIGN(ModelManifest manifest,
                       MakeGptManifest(cfg.cluster.model, 2));
  ASSERT_OK_AND_ASSIGN(FlatLayout layout, FlatLayout::Create(manifest, 2, 2));
  ASSERT_OK_AND_ASSIGN(BatchSampler sampler, TestSampler(cfg));
  DeviceBufferGroup group(0, 2);
  absl::StatusOr<std::unique_ptr<StepEngine>> cpu = StepEngine::Create(
      cfg, &layout, 0, /*client=*/nullptr, &group, &sampler, MakeCpuModel);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cpu.status().message().find("device buffers"), std::string::npos)
      << cpu.status();
  EXPECT_NE(cpu.status().message().find("device-buffers"), std::string::npos)
      << cpu.status();

  StandInRecord record;
  absl::StatusOr<std::unique_ptr<StepEngine>> dev =
      StepEngine::Create(cfg, &layout, 0, /*client=*/nullptr, &group, &sampler,
                         StandInModelFactory(&record));
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_TRUE((*dev)->units_in_model_memory());
}

}  // namespace
}  // namespace zeroshard::testing
