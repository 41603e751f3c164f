#include "model/unit_model.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/kernels/cpu/embedding.h"

namespace zeroshard::model {

absl::Status ValidateMicroBatch(const GptShape& shape, int batch, int seq,
                                absl::Span<const int32_t> tokens,
                                absl::Span<const int32_t> targets) {
  if (batch <= 0 || seq <= 0 || seq > shape.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch shape batch=", batch, " seq=", seq,
        " must be positive with seq <= context ", shape.context));
  }
  const size_t n = static_cast<size_t>(batch) * seq;
  if (tokens.size() != n || targets.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch needs ", n, " tokens and targets, got ", tokens.size(),
        " and ", targets.size()));
  }
  RETURN_IF_ERROR(
      kernels::cpu::CheckTokens(tokens.data(), n, shape.vocab, "token"));
  return kernels::cpu::CheckTokens(targets.data(), n, shape.vocab, "target");
}

absl::Status UnitModel::CheckPhase(Phase want, const char* call) const {
  static const char* kNames[] = {"idle", "forward", "backward",
                                 "embedding backward"};
  if (phase_ != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, " called in the ", kNames[static_cast<int>(phase_)],
        " phase; it belongs to the ", kNames[static_cast<int>(want)],
        " phase"));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::model
