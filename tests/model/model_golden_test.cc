// The whole GPT's loss and gradients against a golden fixture made once by
// PyTorch 1.13 in float64 (tests/fixtures/make_gpt_golden.py; weights are
// BF16-representable, so every precision sees the same weights).
//
// Stated tolerances, per tensor, with scale = max |golden grad| of the tensor:
//   FP32: loss relative 1e-5;  every element |g - golden| <= 2e-5 * scale + 1e-7
//   BF16: loss relative 1e-2;  ||g - golden||_2 <= 5e-2 * ||golden||_2
//   FP16 (computed in FP32 after widening, loss scale 1024): as FP32 after
//         dividing the gradients by the scale.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "model/gpt_manifest.h"
#include "gtest/gtest.h"
#include "model/gpt_forward_backward.h"

namespace zeroshard::model {
namespace {

struct Golden {
  GptShape shape;
  int batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets;
  double loss = 0;
  std::vector<float> params, grads;  // manifest order, unpadded
};

bool ReadGolden(Golden* g) {
  std::ifstream in("tests/fixtures/gpt_golden.bin", std::ios::binary);
  if (!in) return false;
  std::vector<char> b((std::istreambuf_iterator<char>(in)), {});
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (at + n > b.size()) return false;
    std::memcpy(dst, b.data() + at, n);
    at += n;
    return true;
  };
  char magic[8];
  int32_t dims[7];
  int64_t n = 0;
  if (!take(magic, 8) || std::memcmp(magic, "ZSGPTGLD", 8) != 0) return false;
  if (!take(dims, sizeof(dims)) || !take(&n, 8)) return false;
  g->shape = {dims[0], dims[1], dims[2], dims[3], dims[4]};
  g->batch = dims[5];
  g->seq = dims[6];
  const size_t bt = static_cast<size_t>(g->batch) * g->seq;
  g->tokens.resize(bt);
  g->targets.resize(bt);
  g->params.resize(n);
  g->grads.resize(n);
  return take(g->tokens.data(), bt * 4) && take(g->targets.data(), bt * 4) &&
         take(&g->loss, 8) && take(g->params.data(), n * 4) &&
         take(g->grads.data(), n * 4) && at == b.size();
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ReadGolden(&golden_)) << "cannot read tests/fixtures/gpt_golden.bin";
    // Two partitions, so units carry padding that must be skipped.
    auto manifest = MakeGptManifest(golden_.shape, 2);
    ASSERT_TRUE(manifest.ok());
    auto layout = FlatLayout::Create(*manifest, 1, 2);
    ASSERT_TRUE(layout.ok());
    layout_.emplace(*layout);
    ASSERT_EQ(layout_->param_elems(), golden_.params.size());
    flat_.assign(layout_->total_elems(), 0.0f);
    size_t at = 0;
    for (const TensorInfo& t : layout_->tensors()) {
      std::copy_n(golden_.params.begin() + at, t.numel, flat_.begin() + t.offset);
      at += t.numel;
    }
  }

  // Runs the model with params in `dtype` and returns the loss and the grads
  // in manifest order (unpadded).
  double Run(DType dtype, float loss_scale, std::vector<float>* grads) {
    std::vector<uint16_t> half(flat_.size());
    const void* params = flat_.data();
    if (dtype == DType::kBf16) {
      FloatToBf16Array(flat_.data(), half.data(), flat_.size());
      params = half.data();
    } else if (dtype == DType::kFp16) {
      FloatToFp16Array(flat_.data(), half.data(), flat_.size());
      params = half.data();
    }
    std::vector<float> flat_grads(layout_->total_elems(), 0.0f);
    GptBatch batch{golden_.batch, golden_.seq, golden_.tokens, golden_.targets};
    auto r = GptForwardBackward(*layout_, golden_.shape, params, dtype, batch,
                                CheckpointPolicy{}, loss_scale, absl::MakeSpan(flat_grads));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return NAN;
    grads->clear();
    for (const TensorInfo& t : layout_->tensors()) {
      grads->insert(grads->end(), flat_grads.begin() + t.offset,
                    flat_grads.begin() + t.offset + t.numel);
    }
    return r->loss;
  }

  // Applies `check(tensor, got, want, n)` to each tensor's slice.
  template <typename Fn>
  void PerTensor(const std::vector<float>& got, Fn check) {
    size_t at = 0;
    for (const TensorInfo& t : layout_->tensors()) {
      check(t.name, got.data() + at, golden_.grads.data() + at, t.numel);
      at += t.numel;
    }
  }

  void ExpectFp32Close(const std::vector<float>& got, float divide_by) {
    PerTensor(got, [&](const std::string& name, const float* g, const float* w, size_t n) {
      float scale = 0;
      for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(w[i]));
      ASSERT_GT(scale, 0.0f) << name << " has an all-zero golden gradient";
      float worst = 0;
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(g[i] / divide_by - w[i]));
      worst_ = std::max(worst_, worst / scale);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(g[i] / divide_by, w[i], 2e-5f * scale + 1e-7f) << name << "[" << i << "]";
      }
    });
  }

  void TearDown() override {
    if (worst_ > 0) std::cout << "worst gradient error / tensor scale: " << worst_ << "\n";
  }

  float worst_ = 0;
  Golden golden_;
  std::optional<FlatLayout> layout_;
  std::vector<float> flat_;
};

TEST_F(GoldenTest, Fp32MatchesTorch) {
  std::vector<float> grads;
  const double loss = Run(DType::kFp32, 1.0f, &grads);
  EXPECT_NEAR(loss, golden_.loss, 1e-5 * golden_.loss);
  ExpectFp32Close(grads, 1.0f);
}

TEST_F(GoldenTest, Fp16WithLossScaleMatchesTorch) {
  std::vector<float> grads;
  const double loss = Run(DType::kFp16, 1024.0f, &grads);
  EXPECT_NEAR(loss, golden_.loss, 1e-5 * golden_.loss);
  ExpectFp32Close(grads, 1024.0f);
}

TEST_F(GoldenTest, Bf16MatchesTorch) {
  std::vector<float> grads;
  const double loss = Run(DType::kBf16, 1.0f, &grads);
  EXPECT_NEAR(loss, golden_.loss, 1e-2 * golden_.loss);
  std::cout << "bf16 loss " << loss << " golden " << golden_.loss << "\n";
  PerTensor(grads, [&](const std::string& name, const float* g, const float* w, size_t n) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (g[i] - w[i]) * static_cast<double>(g[i] - w[i]);
      norm += static_cast<double>(w[i]) * w[i];
    }
    EXPECT_LE(std::sqrt(err), 5e-2 * std::sqrt(norm)) << name;
    worst_ = std::max(worst_, static_cast<float>(std::sqrt(err / norm)));
  });
}

TEST_F(GoldenTest, PaddingGradientsStayZero) {
  std::vector<float> flat_grads(layout_->total_elems(), 0.0f);
  GptBatch batch{golden_.batch, golden_.seq, golden_.tokens, golden_.targets};
  ASSERT_TRUE(GptForwardBackward(*layout_, golden_.shape, flat_.data(), DType::kFp32,
                                 batch, CheckpointPolicy{}, 1.0f,
                                 absl::MakeSpan(flat_grads)).ok());
  for (const UnitInfo& u : layout_->units()) {
    for (uint64_t i = u.offset + u.numel; i < u.offset + u.padded; ++i) {
      ASSERT_EQ(flat_grads[i], 0.0f) << u.name << " padding at " << i;
    }
  }
}

}  // namespace
}  // namespace zeroshard::model
