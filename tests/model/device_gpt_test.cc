// The CUDA model (model/cuda/device_gpt.h) against the CPU model
// (model/gpt.h) on the same parameters and tokens: the loss and every
// gradient within BF16 (or FP32) tolerance, with parameters and gradients
// given on the host (the staged path the step engine takes) and on the
// device; recomputation under every checkpointing policy gives the device's
// own no-checkpointing bits; misuse is refused. CUDA builds only; the
// comparisons skip without a GPU and say so, the refusals that need no
// device run everywhere.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "model/gpt_manifest.h"
#include "common/init_values.h"
#include "gtest/gtest.h"
#include "tests/support/cuda_device.h"
#include "tests/support/test_seed.h"
#include "model/cuda/device_gpt.h"
#include "model/gpt.h"
#include "model/gpt_forward_backward.h"

namespace zeroshard::model {
namespace {

class DeviceGptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shape_ = {.layers = 3, .heads = 2, .width = 64, .vocab = 96, .context = 32};
    auto layout = FlatLayout::Create(*MakeGptManifest(shape_, 1), 1, 1);
    ASSERT_TRUE(layout.ok());
    layout_.emplace(*layout);
    seed_ = zeroshard::testing::TestSeed();
    trace_.emplace(__FILE__, __LINE__, zeroshard::testing::SeedTrace(seed_));
    params_.resize(layout_->total_elems());
    FillInitialValues(*layout_, seed_, 0.2, {0, layout_->total_elems()},
                      params_.data());
    bf16_.resize(params_.size());
    FloatToBf16Array(params_.data(), bf16_.data(), params_.size());
    std::mt19937 rng(static_cast<uint32_t>(seed_ >> 9));
    std::uniform_int_distribution<int32_t> tok(0, shape_.vocab - 1);
    for (int i = 0; i < kB * kT; ++i) {
      tokens_.push_back(tok(rng));
      targets_.push_back(tok(rng));
    }
  }

  const void* Params(DType dt) const {
    return dt == DType::kBf16 ? static_cast<const void*>(bf16_.data())
                              : params_.data();
  }
  size_t ParamBytes(DType dt) const { return params_.size() * DTypeSize(dt); }
  GptBatch Batch() const { return {kB, kT, tokens_, targets_}; }

  static constexpr int kB = 3, kT = 29;  // rows not a multiple of anything
  GptShape shape_;
  std::optional<FlatLayout> layout_;
  std::vector<float> params_;
  std::vector<uint16_t> bf16_;
  std::vector<int32_t> tokens_, targets_;
  uint64_t seed_ = 0;
  std::optional<::testing::ScopedTrace> trace_;
};

// Relative L2 error of got against want, and whether got is all finite.
double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST_F(DeviceGptTest, MatchesTheCpuModelWithHostAndDeviceBuffers) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  for (const DType dt : {DType::kFp32, DType::kBf16}) {
    SCOPED_TRACE(DTypeName(dt));
    const CheckpointPolicy policy{CheckpointMode::kEveryBlock};
    std::vector<float> want(layout_->total_elems(), 0.0f);
    auto cpu = GptForwardBackward(*layout_, shape_, Params(dt), dt, Batch(),
                                  policy, 1.0f, absl::MakeSpan(want));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto dev = DeviceGptModel::Create(*layout_, shape_, dt, policy, 0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_EQ(std::string((*dev)->device_name()), "cuda:0");
    const double loss_tol = dt == DType::kBf16 ? 2e-3 : 1e-5;
    const double grad_tol = dt == DType::kBf16 ? 3e-2 : 1e-4;

    // Host buffers: staged through the device. Accumulates onto what the
    // buffer held (a second micro-batch), so start from a known value.
    std::vector<float> got(layout_->total_elems(), 0.5f);
    auto host = GptForwardBackward(**dev, *layout_, Params(dt), Batch(), 1.0f,
                                   absl::MakeSpan(got));
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_NEAR(host->loss, cpu->loss, loss_tol * cpu->loss);
    for (float& g : got) g -= 0.5f;
    EXPECT_LT(RelError(got, want), grad_tol) << "host-staged gradients";

    // Device buffers: used in place.
    void* dparams = nullptr;
    float* dgrads = nullptr;
    ASSERT_EQ(cudaMalloc(&dparams, ParamBytes(dt)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dgrads),
                         want.size() * sizeof(float)),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dparams, Params(dt), ParamBytes(dt),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(dgrads, 0, want.size() * sizeof(float)), cudaSuccess);
    // The copy and the memset ran on the legacy stream, which the model's
    // non-blocking stream does not wait for.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto in_place = GptForwardBackward(
        **dev, *layout_, dparams, Batch(), 1.0f,
        absl::Span<float>(dgrads, want.size()));
    ASSERT_TRUE(in_place.ok()) << in_place.status();
    std::vector<float> dgot(want.size());
    ASSERT_EQ(cudaMemcpy(dgot.data(), dgrads, dgot.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(dparams);
    cudaFree(dgrads);
    EXPECT_NEAR(in_place->loss, cpu->loss, loss_tol * cpu->loss);
    EXPECT_LT(RelError(dgot, want), grad_tol) << "device gradients";
    EXPECT_GT(in_place->peak_activation_bytes, 0);
  }
}

TEST_F(DeviceGptTest, CheckpointingPoliciesReproduceTheSameLoss) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  const DType dt = DType::kBf16;
  std::vector<float> ref_grads;
  double ref_loss = 0;
  int64_t ref_peak = 0;
  for (const CheckpointPolicy p : {CheckpointPolicy{CheckpointMode::kNone},
                                   CheckpointPolicy{CheckpointMode::kEveryBlock},
                                   CheckpointPolicy{CheckpointMode::kEveryK, 2}}) {
    auto dev = DeviceGptModel::Create(*layout_, shape_, dt, p, 0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    std::vector<float> g(layout_->total_elems(), 0.0f);
    auto r = GptForwardBackward(**dev, *layout_, Params(dt), Batch(), 1.0f,
                                absl::MakeSpan(g));
    ASSERT_TRUE(r.ok()) << r.status();
    if (ref_grads.empty()) {
      ref_grads = g;
      ref_loss = r->loss;
      ref_peak = r->peak_activation_bytes;
      continue;
    }
    // Same kernels on the same inputs: the loss is the same; gradients
    // agree to the last bits the embedding's atomics leave free.
    EXPECT_EQ(r->loss, ref_loss);
    EXPECT_LT(RelError(g, ref_grads), 1e-5);
    EXPECT_LT(r->peak_activation_bytes, ref_peak);
  }
}

// The online-softmax attentions train the same function: kOnline (FP32 SIMT)
// and, in bf16, kFlash (tensor-core products, P and dS rounded to BF16 for
// them), against the CPU model (which keeps P, rounded to BF16 in bf16)
// within the same tolerances, both with less saved activation memory than
// the probabilities' version, and the same as each other.
TEST_F(DeviceGptTest, OnlineAttentionMatchesTheCpuModel) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  for (const DType dt : {DType::kFp32, DType::kBf16}) {
    SCOPED_TRACE(DTypeName(dt));
    const CheckpointPolicy policy{CheckpointMode::kNone};
    std::vector<float> want(layout_->total_elems(), 0.0f);
    auto cpu = GptForwardBackward(*layout_, shape_, Params(dt), dt, Batch(),
                                  policy, 1.0f, absl::MakeSpan(want));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    std::vector<DeviceAttention> kinds = {DeviceAttention::kProbs,
                                          DeviceAttention::kOnline};
    if (dt == DType::kBf16) kinds.push_back(DeviceAttention::kFlash);
    int64_t peak[3] = {0, 0, 0};
    for (const DeviceAttention a : kinds) {
      SCOPED_TRACE(static_cast<int>(a));
      auto dev = DeviceGptModel::Create(*layout_, shape_, dt, policy, 0, a);
      ASSERT_TRUE(dev.ok()) << dev.status();
      std::vector<float> got(layout_->total_elems(), 0.0f);
      auto r = GptForwardBackward(**dev, *layout_, Params(dt), Batch(), 1.0f,
                                  absl::MakeSpan(got));
      ASSERT_TRUE(r.ok()) << r.status();
      const double loss_tol = dt == DType::kBf16 ? 3e-3 : 1e-5;
      const double grad_tol = dt == DType::kBf16 ? 5e-2 : 1e-4;
      EXPECT_NEAR(r->loss, cpu->loss, loss_tol * cpu->loss);
      EXPECT_LT(RelError(got, want), grad_tol);
      peak[static_cast<int>(a)] = r->peak_activation_bytes;
    }
    EXPECT_LT(peak[1], peak[0]) << "lse [B, H, T] instead of P [B, H, T, T]";
    if (dt == DType::kBf16) {
      EXPECT_EQ(peak[2], peak[1]) << "flash saves what online saves";
    }
  }
}

TEST_F(DeviceGptTest, MisuseIsRefused) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
  auto dev = DeviceGptModel::Create(*layout_, shape_, DType::kBf16,
                                    {CheckpointMode::kEveryBlock}, 0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  DeviceGptModel& m = **dev;
  const UnitInfo& emb = layout_->units()[0];
  const UnitParams e{bf16_.data(), emb.padded, DType::kBf16};
  // Out of order, wrong dtype, short buffers, bad tokens.
  EXPECT_EQ(m.EmbeddingForward(e).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<int32_t> bad = tokens_;
  bad[5] = shape_.vocab;
  EXPECT_EQ(m.Begin(kB, kT, bad, targets_).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Begin(kB, kT, tokens_, targets_).ok());
  EXPECT_EQ(m.EmbeddingForward({params_.data(), emb.padded, DType::kFp32}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.EmbeddingForward({bf16_.data(), emb.numel - 1, DType::kBf16}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.BlockForward(1, e).code(), absl::StatusCode::kFailedPrecondition);
}

// Needs no device: refused before any CUDA call, or a clear error without one.
TEST_F(DeviceGptTest, CreateRefusesWhatItCannotRun) {
  auto fp16 = DeviceGptModel::Create(*layout_, shape_, DType::kFp16,
                                     {CheckpointMode::kEveryBlock}, 0);
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("bf16"), std::string::npos);
  // Head dimension 48: no online kernel for it.
  GptShape hd48 = shape_;
  hd48.width = 96;
  auto l48 = FlatLayout::Create(*MakeGptManifest(hd48, 1), 1, 1);
  ASSERT_TRUE(l48.ok());
  auto online48 = DeviceGptModel::Create(*l48, hd48, DType::kBf16,
                                         {CheckpointMode::kNone}, 0,
                                         DeviceAttention::kOnline);
  ASSERT_FALSE(online48.ok());
  EXPECT_EQ(online48.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(online48.status().message().find("head dimension 48"),
            std::string::npos);
  auto flash48 = DeviceGptModel::Create(*l48, hd48, DType::kBf16,
                                        {CheckpointMode::kNone}, 0,
                                        DeviceAttention::kFlash);
  ASSERT_FALSE(flash48.ok());
  EXPECT_EQ(flash48.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(flash48.status().message().find("head dimension 48"),
            std::string::npos);
  auto flash32 = DeviceGptModel::Create(*layout_, shape_, DType::kFp32,
                                        {CheckpointMode::kNone}, 0,
                                        DeviceAttention::kFlash);
  ASSERT_FALSE(flash32.ok());
  EXPECT_EQ(flash32.status().code(), absl::StatusCode::kInvalidArgument);
  auto far = DeviceGptModel::Create(*layout_, shape_, DType::kBf16,
                                    {CheckpointMode::kEveryBlock}, 999);
  ASSERT_FALSE(far.ok());
  if (zeroshard::testing::NoCudaDeviceReason().empty()) {
    EXPECT_NE(far.status().message().find("cuda:999"), std::string::npos);
  } else {
    EXPECT_EQ(far.status().code(), absl::StatusCode::kFailedPrecondition)
        << far.status();
  }
}

}  // namespace
}  // namespace zeroshard::model
