// zeroshard-worker --device: the flag's forms, and what each resolves to on
// this machine and build (a GPU machine with the CUDA build takes the CUDA
// model; anywhere else auto falls back to the CPU and says why, and an
// explicit cuda request is a clear error).
#include <cstdlib>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "worker/compute_device.h"

namespace zeroshard {
namespace {

using Kind = DeviceRequest::Kind;

TEST(ComputeDeviceTest, ParsesTheFlag) {
  struct Case {
    const char* flag;
    Kind kind;
    int index;
  } cases[] = {{"auto", Kind::kAuto, -1}, {"", Kind::kAuto, -1},
               {"cpu", Kind::kCpu, -1},   {"cuda", Kind::kCuda, -1},
               {"cuda:0", Kind::kCuda, 0}, {"cuda:7", Kind::kCuda, 7}};
  for (const Case& c : cases) {
    auto r = ParseDeviceFlag(c.flag);
    ASSERT_TRUE(r.ok()) << c.flag << ": " << r.status();
    EXPECT_EQ(r->kind, c.kind) << c.flag;
    EXPECT_EQ(r->index, c.index) << c.flag;
  }
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA:0",
                          "cpu:0", "cuda:1.5"}) {
    auto r = ParseDeviceFlag(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--device"), std::string::npos);
  }
}

TEST(ComputeDeviceTest, AttentionFlag) {
  using A = DeviceRequest::Attention;
  DeviceRequest r;
  ASSERT_TRUE(ParseAttentionFlag("online", &r).ok());
  EXPECT_EQ(r.attention, A::kOnline);
  ASSERT_TRUE(ParseAttentionFlag("flash", &r).ok());
  EXPECT_EQ(r.attention, A::kFlash);
  ASSERT_TRUE(ParseAttentionFlag("probs", &r).ok());
  EXPECT_EQ(r.attention, A::kProbs);
  const absl::Status bad = ParseAttentionFlag("fused", &r);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--attention"), std::string::npos);
  EXPECT_EQ(r.attention, A::kProbs);
  // The CPU model keeps the probabilities: online and flash are refused
  // there, by name.
  for (const auto& [a, name] : {std::pair{A::kOnline, "--attention=online"},
                                std::pair{A::kFlash, "--attention=flash"}}) {
    const absl::StatusOr<ComputeChoice> cpu =
        ChooseCompute({Kind::kCpu, -1, a}, 0, DType::kBf16);
    ASSERT_FALSE(cpu.ok()) << name;
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cpu.status().message().find(name), std::string::npos)
        << cpu.status();
    EXPECT_NE(cpu.status().message().find("--device=cpu"), std::string::npos);
  }
  // Flash multiplies in BF16: an fp32 run is refused before any device is
  // looked for, whatever --device says (but cpu, refused above).
  for (const Kind kind : {Kind::kAuto, Kind::kCuda}) {
    const absl::StatusOr<ComputeChoice> fp32 =
        ChooseCompute({kind, -1, A::kFlash}, 0, DType::kFp32);
    ASSERT_FALSE(fp32.ok());
    EXPECT_EQ(fp32.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(fp32.status().message().find("bf16"), std::string::npos)
        << fp32.status();
  }
}

// An architecture without a CUDA model (Llama's) trains on the CPU under
// --device=auto, saying so, and --device=cuda refuses it naming
// --device=cpu, before any device is looked for.
// Llama has a CUDA model as GPT-2 has: the same choice, for the same
// reason, whether this machine has a device or not.
TEST(ComputeDeviceTest, LlamaIsPlacedAsGpt2Is) {
  for (const Kind kind : {Kind::kAuto, Kind::kCuda}) {
    auto llama = ChooseCompute({kind, kind == Kind::kCuda ? 0 : -1}, 0,
                               DType::kBf16, "llama");
    auto gpt2 = ChooseCompute({kind, kind == Kind::kCuda ? 0 : -1}, 0,
                              DType::kBf16, "gpt2");
    ASSERT_EQ(llama.ok(), gpt2.ok()) << llama.status() << " / " << gpt2.status();
    if (!llama.ok()) {
      EXPECT_EQ(llama.status(), gpt2.status());
      continue;
    }
    EXPECT_EQ(llama->name, gpt2->name);
    EXPECT_EQ(llama->description, gpt2->description);
    EXPECT_EQ(llama->description.find("no CUDA model"), std::string::npos)
        << llama->description;
  }
}

TEST(ComputeDeviceTest, CpuIsAlwaysTheCpu) {
  auto c = ChooseCompute({Kind::kCpu, -1}, 0, DType::kBf16);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "cpu");
  EXPECT_EQ(c->description, "compute: cpu (--device=cpu)");
  ASSERT_TRUE(c->make_model);
}

TEST(ComputeDeviceTest, AutoFallsBackToTheCpuAndSaysWhy) {
  auto fp16 = ChooseCompute({Kind::kAuto, -1}, 0, DType::kFp16);
  ASSERT_TRUE(fp16.ok()) << fp16.status();
  EXPECT_EQ(fp16->name, "cpu");
  auto c = ChooseCompute({Kind::kAuto, -1}, 3, DType::kBf16);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->description.rfind("compute: " + c->name + " (", 0), 0)
      << c->description;
  if (c->name == "cpu") {
    // No device here, or no CUDA in the build: the reason is given.
    EXPECT_GT(c->description.size(), std::string("compute: cpu ()").size());
    auto cuda = ChooseCompute({Kind::kCuda, 0}, 0, DType::kBf16);
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition)
        << cuda.status();
    EXPECT_NE(cuda.status().message().find("--device=cpu"), std::string::npos);
  } else {
    // A GPU machine with the CUDA build.
    EXPECT_TRUE(BuiltWithCudaModel());
    EXPECT_EQ(c->name.rfind("cuda:", 0), 0u);
    auto far = ChooseCompute({Kind::kCuda, 999}, 0, DType::kBf16);
    ASSERT_FALSE(far.ok());
    EXPECT_NE(far.status().message().find("cuda:999"), std::string::npos);
    auto fp16_cuda = ChooseCompute({Kind::kCuda, 0}, 0, DType::kFp16);
    EXPECT_EQ(fp16_cuda.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace zeroshard
