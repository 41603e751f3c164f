#include "server/set_weights_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/proto_convert.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {

SetWeightsReactor::SetWeightsReactor(
    AdminCheck check_admin, absl::StatusOr<std::shared_ptr<ModelShard>> state,
    v1::SetWeightsResponse* response, RpcCounters* counters)
    : check_admin_(std::move(check_admin)),
      state_(std::move(state)),
      response_(response),
      counters_(counters) {
  StartRead(&message_);
}

absl::Status SetWeightsReactor::Write(const v1::WeightPiece& piece) {
  if (first_) {
    RETURN_IF_ERROR(check_admin_(piece.admin_token()));
    first_ = false;
  }
  if (!state_.ok()) return state_.status();
  const ModelShard& state = **state_;
  if (piece.dtype() != v1::DTYPE_FP32 && piece.dtype() != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetWeights: piece at offset ", piece.offset(), " has dtype ",
        v1::DType_Name(piece.dtype()), "; want DTYPE_FP32 or DTYPE_BF16"));
  }
  ASSIGN_OR_RETURN(const DType dtype, FromProto(piece.dtype()));
  const size_t esize = DTypeSize(dtype);
  const size_t bytes = piece.data().size();
  if (bytes > kMaxPiecePayloadBytes || bytes % esize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetWeights: piece at offset ", piece.offset(), " carries ", bytes,
        " bytes; want a multiple of ", esize, " (", DTypeName(dtype),
        ") of at most ", kMaxPiecePayloadBytes));
  }
  const uint64_t n = bytes / esize;
  RETURN_IF_ERROR(state.CheckOwned(piece.offset(), n, "SetWeights: piece"));
  counters_->AddBytesIn(bytes);
  state.store().WriteWeights({piece.offset(), piece.offset() + n}, dtype,
                             piece.data().data());
  written_ += n;
  return absl::OkStatus();
}

void SetWeightsReactor::OnReadDone(bool ok) {
  if (!ok) {
    End(absl::OkStatus());
    return;
  }
  absl::Status s = Write(message_);
  message_.Clear();
  if (!s.ok()) {
    End(s);
  } else {
    StartRead(&message_);
  }
}

void SetWeightsReactor::End(const absl::Status& status) {
  result_ = status;
  // Counted before the client can see the status (see RpcCounters).
  counters_->RecordResult(result_);
  recorded_ = true;
  response_->set_elems_written(written_);
  Finish(ToGrpcStatus(status));
}

void SetWeightsReactor::OnDone() {
  if (!recorded_) counters_->RecordResult(result_);
  delete this;
}

}  // namespace zeroshard
