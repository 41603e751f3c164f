#include "model/llama_arch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/hf_llama.h"
#include "model/llama.h"
#include "model/llama_manifest.h"

namespace zeroshard::model {
namespace {

// Sampling: the training model's forward in FP32 over the whole (cropped)
// context for each new token, as GPT-2's generator does.
class LlamaGenerator final : public Generator {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaGenerator>> Create(
      const FlatLayout& layout, const ModelShape& shape, absl::Span<const float> flat) {
    if (flat.size() != layout.total_elems()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights have ", flat.size(), " values, the layout ", layout.total_elems()));
    }
    ASSIGN_OR_RETURN(LlamaModel m, LlamaModel::Create(layout, shape, DType::kFp32,
                                                      CheckpointPolicy{}));
    auto g = std::unique_ptr<LlamaGenerator>(new LlamaGenerator());
    g->layout_ = std::make_shared<const FlatLayout>(layout);
    g->shape_ = shape;
    g->flat_ = flat;
    g->model_ = std::make_unique<LlamaModel>(std::move(m));
    return g;
  }

  absl::StatusOr<std::vector<float>> NextTokenLogits(
      absl::Span<const int32_t> context) const override {
    const int n = static_cast<int>(context.size());
    if (n < 1 || n > shape_.context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a context of ", n, " tokens (1 to ", shape_.context, ")"));
    }
    auto unit = [&](int u) {
      const UnitInfo& info = layout_->units()[u];
      return UnitParams{flat_.data() + info.offset, info.padded, DType::kFp32};
    };
    const std::vector<int32_t> targets(n, 0);
    RETURN_IF_ERROR(model_->Begin(1, n, context, targets));
    RETURN_IF_ERROR(model_->EmbeddingForward(unit(UnitModel::embedding_unit())));
    for (int l = 0; l < shape_.layers; ++l) {
      RETURN_IF_ERROR(model_->BlockForward(l, unit(UnitModel::block_unit(l))));
    }
    return model_->LastRowLogits(unit(model_->final_unit()),
                                 unit(UnitModel::embedding_unit()));
  }
  const ModelShape& shape() const override { return shape_; }

 private:
  LlamaGenerator() = default;
  std::shared_ptr<const FlatLayout> layout_;
  ModelShape shape_;
  absl::Span<const float> flat_;
  std::unique_ptr<LlamaModel> model_;  // forward only; its state per call
};

class Llama final : public ModelArch {
 public:
  absl::string_view name() const override { return "llama"; }
  absl::string_view description() const override {
    return "Llama: pre-RMSNorm blocks, rotary positions, grouped-query attention, "
           "SwiGLU MLP, no biases, an untied head (Hugging Face's LlamaForCausalLM "
           "names)";
  }
  absl::Status Validate(const ModelShape& shape) const override {
    return ValidateLlamaShape(shape);
  }
  absl::StatusOr<ModelManifest> Manifest(const ModelShape& shape,
                                         uint32_t partitions) const override {
    return MakeLlamaManifest(shape, partitions);
  }
  absl::StatusOr<ModelShape> ShapeOfLayout(const FlatLayout& layout,
                                           const ModelShape& given) const override {
    absl::StatusOr<ModelShape> s = LlamaShapeOfLayout(layout, given.heads);
    if (!s.ok()) return s;
    // Not in the tensors: the positions' reach and the arithmetic's constants.
    s->context = given.context;
    s->rope_theta = given.rope_theta;
    s->norm_eps = given.norm_eps;
    RETURN_IF_ERROR(ValidateLlamaShape(*s));
    return s;
  }
  uint64_t ParamCount(const ModelShape& shape) const override {
    return LlamaParamCount(shape);
  }
  absl::StatusOr<std::unique_ptr<UnitModel>> MakeCpuModel(
      const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
      const CheckpointPolicy& policy) const override {
    absl::StatusOr<LlamaModel> m = LlamaModel::Create(layout, shape, param_dtype, policy);
    if (!m.ok()) return m.status();
    return std::make_unique<LlamaModel>(*std::move(m));
  }
  absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(
      const FlatLayout& layout, const ModelShape& shape,
      absl::Span<const float> flat) const override {
    absl::StatusOr<std::unique_ptr<LlamaGenerator>> g =
        LlamaGenerator::Create(layout, shape, flat);
    if (!g.ok()) return g.status();
    return std::unique_ptr<Generator>(std::move(*g));
  }
  // model/llama_block.cc's LlamaBlockActs: h1, atty, x2, h2 (MC each), the
  // expanded qkv (3MC), gu (2MF), act (MF), probs (B·H·T²) in the compute
  // dtype, both RMSNorms' rstd in FP32; its scratch slots (FP32) and the
  // head's.
  ActivationEstimate EstimateActivations(
      const ModelShape& shape, int micro_batch, int seq, Precision precision,
      zeroshard::CheckpointPolicy policy, int k, bool /*online_attention*/) const override {
    const LlamaDims d = LlamaDimsOf(shape);
    ActivationEstimate a;
    a.known = true;
    const double b = micro_batch, t = seq > 0 ? seq : shape.context;
    const double c = d.width, h = d.heads, f = d.mlp_width, v = d.vocab;
    const double cw = (d.heads + 2.0 * d.kv_heads) * d.head_dim;
    const double m = b * t, s = precision == Precision::kBf16 ? 2 : 4;
    a.per_block_internals = (7 * m * c + 3 * m * f) * s + b * h * t * t * s + 2 * m * 4;
    a.block_input = m * c * s;
    CombineActivationPolicy(d.layers, m * c * 4, policy, k, &a);
    a.scratch = 4 * (9 * m * c + 6 * m * f + 2 * m * cw) + (2 * m * c + m * v) * 4;
    if (precision == Precision::kBf16) {
      a.widened_operands = 4 * m * std::max({2 * f, cw, v}) +
                           4 * std::max({2 * m * f, 2 * f * c, v * c});
    }
    return a;
  }
  absl::Status WriteHfSafetensors(
      const std::string& path, const FlatLayout& layout, absl::Span<const float> flat,
      const std::map<std::string, std::string>& metadata) const override {
    return WriteHfLlamaSafetensors(path, layout, flat, metadata);
  }
  absl::Status CheckHfSafetensors(const std::string& path,
                                  const FlatLayout& layout) const override {
    return CheckHfLlamaSafetensors(path, layout);
  }
  absl::StatusOr<std::vector<float>> ReadHfSafetensors(
      const std::string& path, const FlatLayout& layout) const override {
    return ReadHfLlamaSafetensors(path, layout);
  }
};

}  // namespace

const ModelArch& LlamaArch() {
  static const Llama arch;
  return arch;
}

}  // namespace zeroshard::model
