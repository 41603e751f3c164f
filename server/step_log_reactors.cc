#include "server/step_log_reactors.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "wire/proto_buffer.h"
#include "wire/proto_convert.h"
#include "wire/push_grad_codec.h"

namespace zeroshard {

StepLogReactor::StepLogReactor(
    std::vector<std::shared_ptr<const LoggedPush>> pushes, std::string run_id,
    RpcCounters* counters)
    : pushes_(std::move(pushes)),
      run_id_(std::move(run_id)),
      counters_(counters) {
  Next();
}

void StepLogReactor::Next() {
  // Past the pieces of the current push: the next push.
  while (push_ < pushes_.size() && header_sent_ &&
         piece_ >= pushes_[push_]->pieces.size()) {
    ++push_;
    header_sent_ = false;
    piece_ = 0;
    piece_pos_ = 0;
  }
  if (push_ >= pushes_.size()) {
    counters_->RecordResult(absl::OkStatus());
    FinishWith(absl::OkStatus());
    return;
  }
  const LoggedPush& p = *pushes_[push_];
  v1::PushGradMessage msg;
  if (!header_sent_) {
    v1::PushGradHeader* h = msg.mutable_header();
    h->set_step(p.step);
    h->set_attempt(p.attempt);
    h->set_run_id(run_id_);
    h->set_coefficient_known(true);
    h->set_coefficient(p.params.coefficient);
    h->set_skip(p.params.skip);
    for (const StepSetting& s : p.params.settings) {
      SettingToProto(s, h->add_group_settings());
    }
    header_sent_ = true;
  } else {
    const GradPiece& g = p.pieces[piece_];
    const size_t esize = DTypeSize(g.dtype);
    const uint64_t n = std::min<uint64_t>(g.range.size() - piece_pos_,
                                          kMaxPiecePayloadBytes / esize);
    v1::PushGradPiece* piece = msg.mutable_piece();
    piece->set_offset(g.range.begin + piece_pos_);
    piece->set_dtype(ToProto(g.dtype));
    piece->set_data(static_cast<const char*>(g.data) + piece_pos_ * esize,
                    n * esize);
    counters_->AddBytesOut(n * esize);
    piece_pos_ += n;
    if (piece_pos_ >= g.range.size()) {
      ++piece_;
      piece_pos_ = 0;
    }
  }
  buffer_ = ProtoToByteBuffer(msg);
  StartWrite(&buffer_);
}

void StepLogReactor::OnWriteDone(bool ok) {
  if (!ok) {
    const absl::Status s = absl::CancelledError("StepLog: write failed");
    counters_->RecordResult(s);
    FinishWith(s);
    return;
  }
  Next();
}

ReplayReactor::ReplayReactor(grpc::CallbackServerContext* context,
                             absl::StatusOr<std::shared_ptr<ModelShard>> state,
                             grpc::ByteBuffer* response, RpcCounters* counters)
    : context_(context),
      state_(std::move(state)),
      response_(response),
      counters_(counters) {
  StartRead(&message_);
}

absl::Status ReplayReactor::OnMessage() {
  v1::PushGradMessage msg;
  const bool parsed = ParseProtoFromByteBuffer(message_, &msg);
  message_.Clear();
  if (!parsed) {
    return absl::InvalidArgumentError(
        "Replay: a message does not parse as a PushGradMessage");
  }
  RETURN_IF_ERROR(state_.status());
  switch (msg.kind_case()) {
    case v1::PushGradMessage::kHeader:
      RETURN_IF_ERROR(ApplyPending());
      return OnHeader(msg.header());
    case v1::PushGradMessage::kPiece:
      return OnPiece(*msg.mutable_piece());
    default:
      return absl::InvalidArgumentError(
          "Replay: a message is neither a header nor a piece (a replayed "
          "push carries its coefficient in its header: no commit, no "
          "shared memory)");
  }
}

absl::Status ReplayReactor::OnHeader(const v1::PushGradHeader& header) {
  const ModelShard& state = **state_;
  if (header.run_id() != state.run_id()) {
    return absl::PermissionDeniedError(
        absl::StrCat("Replay: a push names run '", header.run_id(),
                     "', but this server serves run '", state.run_id(), "'"));
  }
  if (!header.coefficient_known()) {
    return absl::InvalidArgumentError(
        "Replay: a push's header must carry its coefficient "
        "(coefficient_known)");
  }
  RETURN_IF_ERROR(ValidateCoefficient(header.coefficient()));
  ASSIGN_OR_RETURN(std::vector<StepSetting> settings,
                   SettingsFromProto(header.group_settings()));
  StepParams params{header.coefficient(), header.skip(), std::move(settings)};
  RETURN_IF_ERROR(state.CheckParams(header.step(), params));
  RETURN_IF_ERROR(state.CheckAttempt(header.attempt()));
  have_push_ = true;
  step_ = header.step();
  attempt_ = header.attempt();
  params_ = std::move(params);
  return absl::OkStatus();
}

absl::Status ReplayReactor::OnPiece(v1::PushGradPiece& piece) {
  if (!have_push_) {
    return absl::InvalidArgumentError(
        "Replay: a piece arrived before any header");
  }
  // A skipped step's pieces are not applied: their values may be anything.
  const size_t bytes = piece.data().size();
  RETURN_IF_ERROR(pieces_.Add(**state_, piece.offset(), piece.dtype(),
                              piece.mutable_data(), {.finite = !params_.skip}));
  counters_->AddBytesIn(bytes);
  return absl::OkStatus();
}

absl::Status ReplayReactor::ApplyPending() {
  if (!have_push_) return absl::OkStatus();
  ModelShard& state = **state_;
  std::vector<GradPiece> pieces;
  pieces.reserve(pieces_.size());
  for (const StreamPieces::Piece& p : pieces_.pieces()) {
    pieces.push_back({p.range, p.dtype, p.data.data()});
  }
  // In the order the logging copy applied them (StepLogReactor keeps it).
  absl::StatusOr<ApplyResult> r =
      state.ApplyPush(step_, params_, pieces, attempt_);
  have_push_ = false;
  pieces_.Clear();
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat("Replay: the push of step ", step_, " (attempt ", attempt_,
                     "): ", r.status().message()));
  }
  reply_.set_pushes(reply_.pushes() + 1);
  reply_.set_applied_elems(reply_.applied_elems() + r->applied_elems);
  return absl::OkStatus();
}

void ReplayReactor::OnReadDone(bool ok) {
  if (ok) {
    absl::Status s = OnMessage();
    if (s.ok()) {
      StartRead(&message_);
    } else {
      End(s);
    }
    return;
  }
  if (cancelled_ || context_->IsCancelled()) {
    End(absl::CancelledError(
        "Replay: the stream was cancelled or broken before it ended; the "
        "pushes before its last header stay applied"));
    return;
  }
  if (!state_.ok()) {
    End(state_.status());
    return;
  }
  if (absl::Status s = ApplyPending(); !s.ok()) {
    End(s);
    return;
  }
  reply_.set_version((*state_)->versions().min_version);
  *response_ = ProtoToByteBuffer(reply_);
  End(absl::OkStatus());
}

void ReplayReactor::End(const absl::Status& status) {
  result_ = status;
  pieces_.Clear();
  counters_->RecordResult(result_);
  recorded_ = true;
  FinishWith(status);
}

void ReplayReactor::OnDone() {
  if (!recorded_) counters_->RecordResult(result_);
  delete this;
}

}  // namespace zeroshard
