#include "server/set_weights_reactor.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"
#include "wire/proto_buffer.h"
#include "wire/proto_convert.h"

namespace zeroshard {

SetWeightsReactor::SetWeightsReactor(
    grpc::CallbackServerContext* context,
    absl::StatusOr<std::shared_ptr<ModelShard>> state,
    grpc::ByteBuffer* response, RpcCounters* counters)
    : context_(context),
      state_(std::move(state)),
      response_(response),
      counters_(counters) {
  StartRead(&message_);
}

absl::Status SetWeightsReactor::Buffer() {
  v1::WeightPiece piece;
  const bool parsed = ParseProtoFromByteBuffer(message_, &piece);
  message_.Clear();
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetWeights: message ", pieces_.size() + 1,
        " does not parse as a WeightPiece; nothing is written"));
  }
  if (!state_.ok()) return state_.status();
  const ModelShard& state = **state_;
  if (!have_state_) {
    have_state_ = true;
    state_name_ = piece.state();
    if (!state_name_.empty() && state_name_ != "master") {
      ASSIGN_OR_RETURN(slot_, state.StateSlotIndex(state_name_));
    }
  } else if (piece.state() != state_name_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetWeights: piece at offset ", piece.offset(), " writes state \"",
        piece.state(), "\" but the stream's first wrote \"", state_name_,
        "\": one array a stream; nothing is written"));
  }
  if (piece.has_optimizer_step()) {
    if (optimizer_step_.has_value() &&
        *optimizer_step_ != piece.optimizer_step()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetWeights: pieces set optimizer_step ", *optimizer_step_, " and ",
          piece.optimizer_step(), "; nothing is written"));
    }
    optimizer_step_ = piece.optimizer_step();
  }
  // Master weights are never made non-finite by a pushed value.
  const size_t bytes = piece.data().size();
  RETURN_IF_ERROR(pieces_.Add(state, piece.offset(), piece.dtype(),
                              piece.mutable_data(),
                              {.finite = true, .allow_empty = true}));
  counters_->AddBytesIn(bytes);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SetWeightsReactor::Apply() {
  const ModelShard& state = **state_;
  uint64_t written = 0;
  // The step count first: the one check left that can refuse (a step
  // partly applied), so a refusal writes nothing.
  if (optimizer_step_.has_value()) {
    RETURN_IF_ERROR(state.SetAdamSteps(*optimizer_step_));
  }
  std::vector<float> fp32;
  for (const StreamPieces::Piece& p : pieces_.pieces()) {
    if (!slot_.has_value()) {
      RETURN_IF_ERROR(state.WriteWeights(p.range, p.dtype, p.data.data()));
    } else {
      fp32.resize(p.range.size());
      if (p.dtype == DType::kBf16) {
        for (size_t k = 0; k < fp32.size(); ++k) {
          uint16_t b;
          std::memcpy(&b, p.data.data() + k * sizeof(b), sizeof(b));
          fp32[k] = Bf16ToFloat(b);
        }
      } else {
        std::memcpy(fp32.data(), p.data.data(), fp32.size() * sizeof(float));
      }
      RETURN_IF_ERROR(state.WriteStateSlot(p.range, *slot_, fp32.data()));
    }
    written += p.range.size();
  }
  return written;
}

void SetWeightsReactor::OnReadDone(bool ok) {
  if (ok) {
    absl::Status s = Buffer();
    if (s.ok()) {
      StartRead(&message_);
    } else {
      End(s);
    }
    return;
  }
  // The client half-closed, cancelled, or the connection broke: only the
  // first applies the pieces.
  if (cancelled_ || context_->IsCancelled()) {
    End(absl::CancelledError(
        "SetWeights: the stream was cancelled or broken before it ended; "
        "nothing is written"));
    return;
  }
  if (!state_.ok()) {
    End(state_.status());
    return;
  }
  const absl::StatusOr<uint64_t> written = Apply();
  if (!written.ok()) {
    End(written.status());
    return;
  }
  v1::SetWeightsResponse response;
  response.set_elems_written(*written);
  *response_ = ProtoToByteBuffer(response);
  End(absl::OkStatus());
}

void SetWeightsReactor::End(const absl::Status& status) {
  result_ = status;
  pieces_.Clear();
  // Counted before the client can see the status (see RpcCounters).
  counters_->RecordResult(result_);
  recorded_ = true;
  FinishWith(status);
}

void SetWeightsReactor::OnDone() {
  if (!recorded_) counters_->RecordResult(result_);
  delete this;
}

}  // namespace zeroshard
