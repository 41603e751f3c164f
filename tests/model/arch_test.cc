// The architecture registry (model/arch.h): GPT-2 found by name and behind
// every seam (manifest, parameter count, CPU model, generator, activation
// estimate), unknown names and bad shapes refused with the known names.
#include "model/arch.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gpt_manifest.h"

namespace zeroshard::model {
namespace {

TEST(ArchTest, Gpt2IsFoundAndBuildsWhatItsFunctionsBuild) {
  absl::StatusOr<const ModelArch*> arch = FindArch("gpt2");
  ASSERT_TRUE(arch.ok()) << arch.status();
  EXPECT_EQ((*arch)->name(), "gpt2");
  EXPECT_EQ(ArchNames(), (std::vector<std::string>{"gpt2", "llama"}));
  const ModelShape shape{.layers = 2, .heads = 2, .width = 16, .vocab = 32,
                         .context = 8};
  absl::StatusOr<ModelManifest> m = (*arch)->Manifest(shape, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->arch, "gpt2");
  EXPECT_EQ(m->partition_count, 2u);
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(*m, 1, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ((*arch)->ParamCount(shape), layout->param_elems());
  EXPECT_EQ((*arch)->ParamCount(shape), GptParamCount(shape));
  absl::StatusOr<const ModelArch*> of = ArchOfManifest(*m);
  ASSERT_TRUE(of.ok()) << of.status();
  EXPECT_EQ(*of, *arch);

  absl::StatusOr<std::unique_ptr<UnitModel>> cpu = (*arch)->MakeCpuModel(
      *layout, shape, DType::kFp32, CheckpointPolicy{CheckpointMode::kNone});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->num_blocks(), 2);
  EXPECT_STREQ((*cpu)->device_name(), "cpu");

  const std::vector<float> flat(layout->total_elems(), 0.0f);
  absl::StatusOr<std::unique_ptr<Generator>> gen =
      (*arch)->MakeGenerator(*layout, shape, flat);
  ASSERT_TRUE(gen.ok()) << gen.status();
  absl::StatusOr<std::vector<float>> logits = (*gen)->NextTokenLogits({1, 2, 3});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->size(), 32u);

  const ActivationEstimate a = (*arch)->EstimateActivations(
      shape, 2, 8, Precision::kFp32, zeroshard::CheckpointPolicy::kNone, 1,
      false);
  const ActivationEstimate b = EstimateActivations(
      shape, 2, 8, Precision::kFp32, zeroshard::CheckpointPolicy::kNone, 1);
  EXPECT_TRUE(a.known);
  EXPECT_GT(a.chosen, 0);
  EXPECT_EQ(a.chosen, b.chosen);
  EXPECT_EQ(a.scratch, b.scratch);
}

// Llama behind the same seams: its manifest and count agree, its CPU model
// and generator run (zero weights: uniform logits), its estimate grows with
// the sequence and shrinks under checkpointing.
TEST(ArchTest, LlamaIsFoundBehindEverySeam) {
  absl::StatusOr<const ModelArch*> arch = FindArch("llama");
  ASSERT_TRUE(arch.ok()) << arch.status();
  const ModelShape shape{.layers = 2, .heads = 4, .width = 16, .vocab = 32,
                         .context = 8, .arch = "llama", .kv_heads = 1,
                         .mlp_width = 24};
  absl::StatusOr<ModelManifest> m = (*arch)->Manifest(shape, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->arch, "llama");
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(*m, 1, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ((*arch)->ParamCount(shape), layout->param_elems());
  absl::StatusOr<std::unique_ptr<UnitModel>> cpu = (*arch)->MakeCpuModel(
      *layout, shape, DType::kBf16, CheckpointPolicy{CheckpointMode::kEveryBlock});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->num_blocks(), 2);
  const std::vector<float> flat(layout->total_elems(), 0.0f);
  absl::StatusOr<std::unique_ptr<Generator>> gen =
      (*arch)->MakeGenerator(*layout, shape, flat);
  ASSERT_TRUE(gen.ok()) << gen.status();
  absl::StatusOr<std::vector<float>> logits = (*gen)->NextTokenLogits({1, 2, 3});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->size(), 32u);
  EXPECT_FALSE((*gen)->NextTokenLogits(std::vector<int32_t>(9, 1)).ok());
  const ActivationEstimate none = (*arch)->EstimateActivations(
      shape, 2, 8, Precision::kBf16, zeroshard::CheckpointPolicy::kNone, 1, false);
  const ActivationEstimate every = (*arch)->EstimateActivations(
      shape, 2, 8, Precision::kBf16, zeroshard::CheckpointPolicy::kEveryBlock, 1, false);
  const ActivationEstimate longer = (*arch)->EstimateActivations(
      shape, 2, 16, Precision::kBf16, zeroshard::CheckpointPolicy::kNone, 1, false);
  EXPECT_GT(none.chosen, 0);
  EXPECT_LE(every.chosen, none.chosen);
  EXPECT_GT(longer.chosen, none.chosen);
  // A GPT-2 manifest is not a Llama layout.
  absl::StatusOr<ModelManifest> gpt = (*FindArch("gpt2"))->Manifest(ModelShape{}, 1);
  ASSERT_TRUE(gpt.ok());
  absl::StatusOr<FlatLayout> gpt_layout = FlatLayout::Create(*gpt, 1, 1);
  ASSERT_TRUE(gpt_layout.ok());
  EXPECT_FALSE((*arch)->ShapeOfLayout(*gpt_layout, ModelShape{.heads = 4}).ok());
}

TEST(ArchTest, UnknownNamesAndBadShapesAreRefusedNamingWhatIsKnown) {
  absl::StatusOr<const ModelArch*> mamba = FindArch("mamba");
  ASSERT_FALSE(mamba.ok());
  EXPECT_EQ(mamba.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(mamba.status().message().find("'mamba'"), std::string::npos);
  EXPECT_NE(mamba.status().message().find("known: gpt2, llama"), std::string::npos)
      << mamba.status();

  ModelShape shape;
  shape.arch = "mamba";
  EXPECT_EQ(ArchForShape(shape).status().code(), absl::StatusCode::kNotFound);
  shape.arch = "GPT 2";
  EXPECT_EQ(ArchForShape(shape).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(ValidateModelShape(shape).ok());  // not a name
  shape.arch = "gpt2";
  shape.width = 10;
  shape.heads = 4;
  absl::StatusOr<const ModelArch*> odd = ArchForShape(shape);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("divisible by heads"),
            std::string::npos)
      << odd.status();

  ModelManifest unnamed;
  EXPECT_EQ(ArchOfManifest(unnamed).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace zeroshard::model
