// The CUDA kernels' argument checks, decided before any CUDA call, and the
// library's clear errors without a device: they run on every machine,
// device or not (kernels_cuda_test.cc holds the device comparisons; one
// program, kernels_cuda_test).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "tests/support/cuda_device.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/attention_gemm.h"
#include "model/kernels/cuda/cross_entropy.h"
#include "model/kernels/cuda/cublaslt_api.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/flash_attention.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/grad_norm.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/cuda/linear.h"
#include "model/kernels/cuda/llama_ops.h"
#include "model/kernels/cuda/op_timer.h"
#include "model/kernels/cuda/online_attention.h"

namespace zeroshard::kernels {
namespace {

// Decided before any CUDA call: these run on every machine.
// Outside a span the timer records nothing and costs no CUDA call.
TEST(CudaKernelArgsTest, OpTimerOutsideASpanIsANoOp) {
  cuda::OpTimer timer;
  timer.Mark("nothing");
  cuda::MarkOp(nullptr, "nothing either");
  absl::StatusOr<std::vector<cuda::OpTime>> times = timer.Finish();
  ASSERT_TRUE(times.ok()) << times.status();
  EXPECT_TRUE(times->empty());
}

TEST(CudaKernelArgsTest, BadArgumentsAreRefusedBeforeLaunch) {
  float x[4] = {};
  EXPECT_EQ(cuda::GeluForward(x, x, -1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::GeluForward(nullptr, x, 4, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cuda::GeluForward(nullptr, nullptr, 0, nullptr).ok());
  EXPECT_EQ(cuda::LayerNormForward(x, x, x, 0, 4, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Llama's ops.
  EXPECT_EQ(cuda::RmsNormForward(x, x, 1, 4, 0.0f, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::RmsNormBackward(x, x, nullptr, x, 1, 4, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::RopeApply(x, x, 2, 3, x, 2, 1, 4, false, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::RopeApply(x, x, 2, 2, x, 3, 1, 2, false, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::SwiGluForward(x, 0, 2, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::ExpandGroupedQkv({.heads = 3, .kv_heads = 2, .head_dim = 1}, x, 1, x,
                                   nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  double loss;
  const int32_t t[1] = {0};
  EXPECT_EQ(
      cuda::SoftmaxCrossEntropy(x, t, 1, -3, 1.0f, &loss, x, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::EmbeddingForward(t, 1, 0, 4, 4, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::ReduceGradNormTerms(x, -1, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const AttentionShape bad_heads{.batch = 1, .seq = 4, .width = 10, .heads = 3};
  EXPECT_EQ(cuda::AttentionForward(bad_heads, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  cuda::GemmAttention no_handle(nullptr);
  EXPECT_EQ(no_handle.Forward({.batch = 1, .seq = 4, .width = 8, .heads = 2},
                              x, x, x, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_handle.Forward(bad_heads, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const AttentionShape hd48{.batch = 1, .seq = 4, .width = 96, .heads = 2};
  EXPECT_EQ(cuda::OnlineAttentionForward(hd48, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const AttentionShape hd16{.batch = 1, .seq = 4, .width = 32, .heads = 2};
  EXPECT_EQ(cuda::OnlineAttentionBackward(hd16, x, x, x, nullptr, x, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Flash: BF16 only, head dims 16..128, 16-byte aligned qkv; all refused
  // before any CUDA call.
  cuda::FlashAttention flash;
  const AttentionShape hd64_fp32{.batch = 1, .seq = 4, .width = 128,
                                 .heads = 2, .dtype = DType::kFp32};
  EXPECT_EQ(flash.Forward(hd64_fp32, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  AttentionShape hd48_bf16 = hd48;
  hd48_bf16.dtype = DType::kBf16;
  EXPECT_EQ(flash.Backward(hd48_bf16, x, x, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const AttentionShape hd16_bf16{.batch = 1, .seq = 4, .width = 32,
                                 .heads = 2, .dtype = DType::kBf16};
  alignas(16) uint16_t raw[16] = {};
  EXPECT_EQ(flash.Forward(hd16_bf16, raw + 1, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flash.Forward(hd16_bf16, nullptr, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status fp32_why = cuda::CheckFlashAttentionShape(hd64_fp32);
  EXPECT_NE(fp32_why.message().find("bf16"), std::string::npos) << fp32_why;
  const AttentionShape too_long{.batch = 1, .seq = 20000, .width = 8, .heads = 1};
  EXPECT_EQ(cuda::AttentionBackward(too_long, x, x, x, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::ColumnSumAccumulate(x, -1, 4, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::ColumnSumAccumulate(nullptr, 2, 2, x, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  cuda::Linear lin(nullptr, nullptr);  // refused before either is used
  EXPECT_EQ(lin.Forward({x, DType::kFp32}, {x, DType::kFp32}, nullptr, 0, 2, 2,
                        x, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lin.Backward(nullptr, {x, DType::kFp32}, {x, DType::kFp32}, 2, 2,
                         2, x, x, x, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// cuBLASLt is loaded at run time (cublaslt_api.h): the toolkit's library is
// found (every CUDA build has it), device or not.
TEST(CudaKernelArgsTest, CublasLtLoadsAtRunTime) {
  const auto lt = cuda::LoadCublasLt();
  ASSERT_TRUE(lt.ok()) << lt.status();
  EXPECT_NE((*lt)->Matmul, nullptr);
  EXPECT_EQ(*lt, *cuda::LoadCublasLt());  // loaded once
}

// Without a device a well-formed launch is a clear error, never a crash.
TEST(CudaKernelArgsTest, NoDeviceIsAClearError) {
  if (zeroshard::testing::NoCudaDeviceReason().empty()) {
    GTEST_SKIP() << "a CUDA device is present (the comparisons cover it)";
  }
  float x[4] = {};
  const absl::Status s = cuda::GeluForward(x, x, 4, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kOk);
  EXPECT_EQ(cuda::CublasLtGemm::Create().status().ok(), false);
}

}  // namespace
}  // namespace zeroshard::kernels
