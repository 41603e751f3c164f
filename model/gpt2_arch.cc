#include "model/gpt2_arch.h"

#include <utility>

#include "model/generate.h"
#include "model/gpt.h"
#include "model/gpt_manifest.h"
#include "model/hf_gpt2.h"

namespace zeroshard::model {
namespace {

class Gpt2 final : public ModelArch {
 public:
  absl::string_view name() const override { return "gpt2"; }
  absl::string_view description() const override {
    return "GPT-2: learned positions, pre-LayerNorm blocks, GELU MLP, head "
           "tied to the token embedding";
  }
  absl::Status Validate(const ModelShape& shape) const override {
    return ValidateGptShape(shape);
  }
  absl::StatusOr<ModelManifest> Manifest(const ModelShape& shape,
                                         uint32_t partitions) const override {
    return MakeGptManifest(shape, partitions);
  }
  absl::StatusOr<ModelShape> ShapeOfLayout(const FlatLayout& layout,
                                           const ModelShape& given) const override {
    absl::StatusOr<ModelShape> s = Gpt2ShapeOfLayout(layout, given.heads);
    if (s.ok()) s->arch = std::string(name());
    return s;
  }
  uint64_t ParamCount(const ModelShape& shape) const override {
    return GptParamCount(shape);
  }
  absl::StatusOr<std::unique_ptr<UnitModel>> MakeCpuModel(
      const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
      const CheckpointPolicy& policy) const override {
    absl::StatusOr<GptModel> m =
        GptModel::Create(layout, shape, param_dtype, policy);
    if (!m.ok()) return m.status();
    return std::make_unique<GptModel>(*std::move(m));
  }
  absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(
      const FlatLayout& layout, const ModelShape& shape,
      absl::Span<const float> flat) const override {
    absl::StatusOr<GptGenerator> g = GptGenerator::Create(layout, shape, flat);
    if (!g.ok()) return g.status();
    return std::make_unique<GptGenerator>(*std::move(g));
  }
  ActivationEstimate EstimateActivations(
      const ModelShape& shape, int micro_batch, int seq, Precision precision,
      zeroshard::CheckpointPolicy policy, int k,
      bool online_attention) const override {
    return zeroshard::EstimateActivations(shape, micro_batch, seq, precision,
                                          policy, k, online_attention);
  }
  absl::Status WriteHfSafetensors(
      const std::string& path, const FlatLayout& layout,
      absl::Span<const float> flat,
      const std::map<std::string, std::string>& metadata) const override {
    return zeroshard::WriteHfSafetensors(path, layout, flat, metadata);
  }
  absl::Status CheckHfSafetensors(const std::string& path,
                                  const FlatLayout& layout) const override {
    return zeroshard::CheckHfSafetensors(path, layout);
  }
  absl::StatusOr<std::vector<float>> ReadHfSafetensors(
      const std::string& path, const FlatLayout& layout) const override {
    return zeroshard::ReadHfSafetensors(path, layout);
  }
};

}  // namespace

const ModelArch& Gpt2Arch() {
  static const Gpt2 arch;
  return arch;
}

}  // namespace zeroshard::model
