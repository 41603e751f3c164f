// The CUDA Llama model (model/cuda/device_llama.h) against the CPU model
// (model/llama.h) on the same parameters and tokens: the loss and every
// gradient within BF16 (or FP32) tolerance, with parameters and gradients on
// the host (the staged path the step engine takes) and on the device, for
// grouped-query attention with an untied head and multi-query attention
// with a tied one, under each attention kind; recomputation under every
// checkpointing policy gives the device's own no-checkpointing result. CUDA
// builds only; the comparisons skip without a GPU and say so, the refusals
// that need no device run everywhere.
#include <cuda_runtime_api.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/init_values.h"
#include "gtest/gtest.h"
#include "model/cuda/device_arch.h"
#include "model/cuda/device_llama.h"
#include "model/gpt_forward_backward.h"
#include "model/llama.h"
#include "model/llama_manifest.h"
#include "tests/support/cuda_device.h"
#include "tests/support/test_seed.h"

namespace zeroshard::model {
namespace {

// GQA: 4 query heads over 2 key/value heads of 32, an MLP of 160, an
// untied head. Head dimension 32 has online and flash kernels.
ModelShape GqaShape() {
  return {.layers = 2, .heads = 4, .width = 128, .vocab = 96, .context = 32,
          .arch = "llama", .kv_heads = 2, .mlp_width = 160};
}

// Multi-query (one key/value head), the head tied to the embedding.
ModelShape MqaTiedShape() {
  ModelShape s = GqaShape();
  s.heads = 2;
  s.width = 64;
  s.kv_heads = 1;
  s.mlp_width = 96;
  s.tie_embeddings = true;
  return s;
}

// Relative L2 error of got against want, and whether got is all finite.
double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// One shape's layout, parameters (FP32 and BF16) and a micro-batch.
struct LlamaCase {
  explicit LlamaCase(const ModelShape& s, uint64_t seed) : shape(s) {
    auto manifest = MakeLlamaManifest(shape, 1);
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    auto l = FlatLayout::Create(*manifest, 1, 1);
    EXPECT_TRUE(l.ok()) << l.status();
    layout.emplace(*l);
    params.resize(layout->total_elems());
    FillInitialValues(*layout, seed, 0.2, {0, layout->total_elems()},
                      params.data());
    bf16.resize(params.size());
    FloatToBf16Array(params.data(), bf16.data(), params.size());
    std::mt19937 rng(static_cast<uint32_t>(seed >> 7));
    std::uniform_int_distribution<int32_t> tok(0, shape.vocab - 1);
    for (int i = 0; i < kB * kT; ++i) {
      tokens.push_back(tok(rng));
      targets.push_back(tok(rng));
    }
  }
  const void* Params(DType dt) const {
    return dt == DType::kBf16 ? static_cast<const void*>(bf16.data())
                              : params.data();
  }
  size_t ParamBytes(DType dt) const { return params.size() * DTypeSize(dt); }
  GptBatch Batch() const { return {kB, kT, tokens, targets}; }
  // The CPU model's loss and gradients.
  absl::StatusOr<GptStepResult> Cpu(DType dt, std::vector<float>* grads) const {
    auto m = LlamaModel::Create(*layout, shape, dt, {CheckpointMode::kNone});
    if (!m.ok()) return m.status();
    grads->assign(layout->total_elems(), 0.0f);
    return GptForwardBackward(*m, *layout, Params(dt), Batch(), 1.0f,
                              absl::MakeSpan(*grads));
  }

  static constexpr int kB = 3, kT = 29;  // rows not a multiple of anything
  ModelShape shape;
  std::optional<FlatLayout> layout;
  std::vector<float> params;
  std::vector<uint16_t> bf16;
  std::vector<int32_t> tokens, targets;
};

class DeviceLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = zeroshard::testing::TestSeed();
    trace_.emplace(__FILE__, __LINE__, zeroshard::testing::SeedTrace(seed_));
  }
  uint64_t seed_ = 0;
  std::optional<::testing::ScopedTrace> trace_;
};

TEST_F(DeviceLlamaTest, MatchesTheCpuModelWithHostAndDeviceBuffers) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  for (const ModelShape& shape : {GqaShape(), MqaTiedShape()}) {
    SCOPED_TRACE(shape.tie_embeddings ? "multi-query, tied" : "grouped, untied");
    const LlamaCase c(shape, seed_);
    for (const DType dt : {DType::kFp32, DType::kBf16}) {
      SCOPED_TRACE(DTypeName(dt));
      std::vector<float> want;
      auto cpu = c.Cpu(dt, &want);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      // Through the architecture's dispatch, as the worker makes it.
      auto dev = MakeDeviceModel(*c.layout, shape, dt,
                                 {CheckpointMode::kEveryBlock}, 0,
                                 DeviceAttention::kProbs);
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_NE(dynamic_cast<DeviceLlamaModel*>(dev->get()), nullptr);
      EXPECT_EQ(std::string((*dev)->device_name()), "cuda:0");
      const double loss_tol = dt == DType::kBf16 ? 2e-3 : 1e-5;
      const double grad_tol = dt == DType::kBf16 ? 3e-2 : 1e-4;

      // Host buffers, staged; accumulated onto what the buffer held.
      std::vector<float> got(c.layout->total_elems(), 0.5f);
      auto host = GptForwardBackward(**dev, *c.layout, c.Params(dt), c.Batch(),
                                     1.0f, absl::MakeSpan(got));
      ASSERT_TRUE(host.ok()) << host.status();
      EXPECT_NEAR(host->loss, cpu->loss, loss_tol * cpu->loss);
      for (float& g : got) g -= 0.5f;
      EXPECT_LT(RelErr(got, want), grad_tol) << "host-staged gradients";

      // Device buffers, used in place.
      void* dparams = nullptr;
      float* dgrads = nullptr;
      ASSERT_EQ(cudaMalloc(&dparams, c.ParamBytes(dt)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dgrads),
                           want.size() * sizeof(float)),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dparams, c.Params(dt), c.ParamBytes(dt),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaMemset(dgrads, 0, want.size() * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto in_place = GptForwardBackward(**dev, *c.layout, dparams, c.Batch(), 1.0f,
                                         absl::Span<float>(dgrads, want.size()));
      ASSERT_TRUE(in_place.ok()) << in_place.status();
      std::vector<float> dgot(want.size());
      ASSERT_EQ(cudaMemcpy(dgot.data(), dgrads, dgot.size() * sizeof(float),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      cudaFree(dparams);
      cudaFree(dgrads);
      EXPECT_NEAR(in_place->loss, cpu->loss, loss_tol * cpu->loss);
      EXPECT_LT(RelErr(dgot, want), grad_tol) << "device gradients";
      EXPECT_GT(in_place->peak_activation_bytes, 0);
    }
  }
}

// The online-softmax attentions (and, in bf16, flash) train the same
// function as the probabilities' version, with less saved memory.
TEST_F(DeviceLlamaTest, AttentionKindsMatchTheCpuModel) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  const LlamaCase c(GqaShape(), seed_);
  for (const DType dt : {DType::kFp32, DType::kBf16}) {
    SCOPED_TRACE(DTypeName(dt));
    std::vector<float> want;
    auto cpu = c.Cpu(dt, &want);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    std::vector<DeviceAttention> kinds = {DeviceAttention::kProbs,
                                          DeviceAttention::kOnline};
    if (dt == DType::kBf16) kinds.push_back(DeviceAttention::kFlash);
    int64_t peak[3] = {0, 0, 0};
    for (const DeviceAttention a : kinds) {
      SCOPED_TRACE(static_cast<int>(a));
      auto dev = DeviceLlamaModel::Create(*c.layout, c.shape, dt,
                                          {CheckpointMode::kNone}, 0, a);
      ASSERT_TRUE(dev.ok()) << dev.status();
      std::vector<float> got(c.layout->total_elems(), 0.0f);
      auto r = GptForwardBackward(**dev, *c.layout, c.Params(dt), c.Batch(), 1.0f,
                                  absl::MakeSpan(got));
      ASSERT_TRUE(r.ok()) << r.status();
      const double loss_tol = dt == DType::kBf16 ? 3e-3 : 1e-5;
      const double grad_tol = dt == DType::kBf16 ? 5e-2 : 1e-4;
      EXPECT_NEAR(r->loss, cpu->loss, loss_tol * cpu->loss);
      EXPECT_LT(RelErr(got, want), grad_tol);
      peak[static_cast<int>(a)] = r->peak_activation_bytes;
    }
    EXPECT_LT(peak[1], peak[0]) << "lse [B, H, T] instead of P [B, H, T, T]";
    if (dt == DType::kBf16) {
      EXPECT_EQ(peak[2], peak[1]);
    }
  }
}

TEST_F(DeviceLlamaTest, CheckpointingPoliciesReproduceTheSameLoss) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  const LlamaCase c(GqaShape(), seed_);
  std::vector<float> ref_grads;
  double ref_loss = 0;
  int64_t ref_peak = 0;
  for (const CheckpointPolicy p : {CheckpointPolicy{CheckpointMode::kNone},
                                   CheckpointPolicy{CheckpointMode::kEveryBlock},
                                   CheckpointPolicy{CheckpointMode::kEveryK, 2}}) {
    auto dev = DeviceLlamaModel::Create(*c.layout, c.shape, DType::kBf16, p, 0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    std::vector<float> g(c.layout->total_elems(), 0.0f);
    auto r = GptForwardBackward(**dev, *c.layout, c.Params(DType::kBf16),
                                c.Batch(), 1.0f, absl::MakeSpan(g));
    ASSERT_TRUE(r.ok()) << r.status();
    if (ref_grads.empty()) {
      ref_grads = g;
      ref_loss = r->loss;
      ref_peak = r->peak_activation_bytes;
      continue;
    }
    // Same kernels on the same inputs: the same loss; the gradients agree
    // to the last bits the embedding's atomics leave free.
    EXPECT_EQ(r->loss, ref_loss);
    EXPECT_LT(RelErr(g, ref_grads), 1e-5);
    EXPECT_LT(r->peak_activation_bytes, ref_peak);
  }
}

// Needs no device: refused before any CUDA call, or a clear error without one.
TEST_F(DeviceLlamaTest, CreateRefusesWhatItCannotRun) {
  const LlamaCase c(GqaShape(), seed_);
  auto fp16 = DeviceLlamaModel::Create(*c.layout, c.shape, DType::kFp16,
                                       {CheckpointMode::kEveryBlock}, 0);
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("bf16"), std::string::npos);
  // Another model's layout.
  ModelShape other = c.shape;
  other.kv_heads = 4;
  auto mismatch = DeviceLlamaModel::Create(*c.layout, other, DType::kBf16,
                                           {CheckpointMode::kNone}, 0);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  // Head dimension 48: no online or flash kernel for it.
  ModelShape hd48 = c.shape;
  hd48.width = 192;
  const LlamaCase c48(hd48, seed_);
  for (const DeviceAttention a : {DeviceAttention::kOnline, DeviceAttention::kFlash}) {
    auto r = DeviceLlamaModel::Create(*c48.layout, hd48, DType::kBf16,
                                      {CheckpointMode::kNone}, 0, a);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("head dimension 48"), std::string::npos)
        << r.status();
  }
  auto flash32 = DeviceLlamaModel::Create(*c.layout, c.shape, DType::kFp32,
                                          {CheckpointMode::kNone}, 0,
                                          DeviceAttention::kFlash);
  ASSERT_FALSE(flash32.ok());
  EXPECT_EQ(flash32.status().code(), absl::StatusCode::kInvalidArgument);
  auto far = MakeDeviceModel(*c.layout, c.shape, DType::kBf16,
                             {CheckpointMode::kEveryBlock}, 999,
                             DeviceAttention::kProbs);
  ASSERT_FALSE(far.ok());
  if (zeroshard::testing::NoCudaDeviceReason().empty()) {
    EXPECT_NE(far.status().message().find("cuda:999"), std::string::npos);
  } else {
    EXPECT_EQ(far.status().code(), absl::StatusCode::kFailedPrecondition)
        << far.status();
  }
  EXPECT_TRUE(HasDeviceModel("llama"));
}

}  // namespace
}  // namespace zeroshard::model
