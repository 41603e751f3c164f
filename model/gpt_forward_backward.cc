#include "model/gpt_forward_backward.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/gpt.h"

namespace zeroshard::model {

absl::StatusOr<GptStepResult> GptForwardBackward(
    const FlatLayout& layout, const GptShape& shape, const void* params,
    DType dtype, const GptBatch& batch, const CheckpointPolicy& policy,
    float loss_scale, absl::Span<float> grads) {
  ASSIGN_OR_RETURN(GptModel model, GptModel::Create(layout, shape, dtype, policy));
  return GptForwardBackward(model, layout, params, batch, loss_scale, grads);
}

absl::StatusOr<GptStepResult> GptForwardBackward(
    UnitModel& model, const FlatLayout& layout, const void* params,
    const GptBatch& batch, float loss_scale, absl::Span<float> grads) {
  if (params == nullptr) return absl::InvalidArgumentError("params are null");
  if (grads.size() != layout.total_elems()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grads has ", grads.size(), " elements, the flat space has ",
        layout.total_elems()));
  }
  const DType dtype = model.param_dtype();
  const size_t esize = DTypeSize(dtype);
  auto unit = [&](int u) {
    const UnitInfo& info = layout.units()[u];
    return UnitParams{static_cast<const char*>(params) + info.offset * esize,
                      info.padded, dtype};
  };
  auto grad = [&](int u) {
    const UnitInfo& info = layout.units()[u];
    return grads.subspan(info.offset, info.padded);
  };
  const int L = model.num_blocks();
  RETURN_IF_ERROR(model.Begin(batch.batch, batch.seq, batch.tokens, batch.targets));
  RETURN_IF_ERROR(model.EmbeddingForward(unit(UnitModel::embedding_unit())));
  for (int l = 0; l < L; ++l) {
    RETURN_IF_ERROR(model.BlockForward(l, unit(UnitModel::block_unit(l))));
  }
  GptStepResult result;
  ASSIGN_OR_RETURN(result.loss, model.FinalForwardBackward(
                                    unit(model.final_unit()),
                                    unit(UnitModel::embedding_unit()), loss_scale,
                                    grad(model.final_unit()),
                                    grad(UnitModel::embedding_unit())));
  for (int l = L - 1; l >= 0; --l) {
    if (model.NeedsRecompute(l)) {
      for (int j = model.RecomputeStart(l); j <= l; ++j) {
        RETURN_IF_ERROR(model.RecomputeBlock(j, unit(UnitModel::block_unit(j))));
      }
    }
    RETURN_IF_ERROR(model.BlockBackward(l, unit(UnitModel::block_unit(l)),
                                        grad(UnitModel::block_unit(l))));
  }
  RETURN_IF_ERROR(model.EmbeddingBackward(grad(UnitModel::embedding_unit())));
  RETURN_IF_ERROR(model.Synchronize());  // the grads are complete on return
  result.peak_activation_bytes = model.memory().peak();
  return result;
}

}  // namespace zeroshard::model
