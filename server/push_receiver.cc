#include "server/push_receiver.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/proto_convert.h"
#include "common/status_macros.h"
#include "optim/grad_scan.h"

namespace zeroshard {

PushReceiver::PushReceiver(std::shared_ptr<ModelShard> state,
                           const SharedRegions* regions)
    : state_(std::move(state)), regions_(regions) {}

PushReceiver::~PushReceiver() { FreeBuffers(); }

void PushReceiver::FreeBuffers() {
  if (buffered_bytes_ != 0) state_->ReleasePushBytes(buffered_bytes_);
  buffered_bytes_ = 0;
  buffered_.clear();
}

absl::Status PushReceiver::OnMessage(v1::PushGradMessage& message) {
  if (finished_) {
    return absl::InvalidArgumentError(
        "PushGrad: a message arrived after the commit; the commit must be last");
  }
  switch (message.kind_case()) {
    case v1::PushGradMessage::kHeader:
      return OnHeader(message.header());
    case v1::PushGradMessage::kPiece:
      return OnProtoPiece(*message.mutable_piece());
    case v1::PushGradMessage::kCommit:
      return OnCommit(message.commit());
    case v1::PushGradMessage::kRegionPiece:
      return OnRegionPiece(message.region_piece());
    default:
      return absl::InvalidArgumentError(
          "PushGrad: message has no header, piece or commit");
  }
}

absl::Status PushReceiver::OnHeader(const v1::PushGradHeader& header) {
  if (have_header_) {
    return absl::InvalidArgumentError(
        "PushGrad: a second header; a stream carries exactly one, first");
  }
  if (header.run_id() != state_->run_id()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "PushGrad: the push names run '", header.run_id(),
        "', but this server serves run '", state_->run_id(), "'"));
  }
  // Membership only (an empty range): the ranges are checked per piece.
  RETURN_IF_ERROR(state_->CheckPusher(header.worker(), 0, 0));
  if (header.coefficient_known()) {
    RETURN_IF_ERROR(ValidateCoefficient(header.coefficient()));
    ASSIGN_OR_RETURN(std::vector<StepSetting> settings,
                     SettingsFromProto(header.group_settings()));
    known_ = StepParams{header.coefficient(), header.skip(),
                        std::move(settings)};
    RETURN_IF_ERROR(state_->CheckParams(header.step(), known_));
  } else if (header.group_settings_size() > 0) {
    return absl::InvalidArgumentError(
        "PushGrad: group_settings in a header without coefficient_known; "
        "a commit carries them");
  }
  // Checked, not recorded: the attempt is the servers' only once a claim or
  // a prepare of this stream is accepted.
  RETURN_IF_ERROR(state_->CheckAttempt(header.attempt()));
  header_ = header;
  have_header_ = true;
  return absl::OkStatus();
}

absl::Status PushReceiver::OnProtoPiece(v1::PushGradPiece& piece) {
  auto bytes =
      std::make_shared<std::string>(std::move(*piece.mutable_data()));
  PushGradPieceInput in;
  in.offset = piece.offset();
  in.dtype = piece.dtype();
  in.bytes = bytes->size();
  in.segments.emplace_back(reinterpret_cast<const uint8_t*>(bytes->data()),
                           bytes->size());
  in.owner = std::move(bytes);
  return OnPiece(std::move(in));
}

absl::Status PushReceiver::OnRegionPiece(
    const v1::PushGradRegionPiece& piece) {
  if (regions_ == nullptr) {
    return absl::FailedPreconditionError(
        "PushGrad: a piece in shared memory, but this server serves none");
  }
  ASSIGN_OR_RETURN(
      SharedRegions::Resolved region,
      regions_->Resolve(piece.region(), piece.region_offset(), piece.bytes(),
                        absl::StrCat("PushGrad: piece at offset ",
                                     piece.offset())));
  const uint8_t* at = region.at;
  PushGradPieceInput in;
  in.offset = piece.offset();
  in.dtype = piece.dtype();
  in.bytes = piece.bytes();
  // A piece that waits for a commit is copied, once OnPiece's limits hold
  // for it; one applied now (or refused) is read where it lies.
  if (have_header_ && !header_.coefficient_known() && !finished_ &&
      piece.bytes() <= kMaxPiecePayloadBytes) {
    auto copy = std::make_shared<std::string>(
        reinterpret_cast<const char*>(at), piece.bytes());
    in.segments.emplace_back(reinterpret_cast<const uint8_t*>(copy->data()),
                             copy->size());
    in.owner = std::move(copy);
  } else {
    in.segments.emplace_back(at, piece.bytes());
    in.owner = std::move(region.memory);
  }
  return OnPiece(std::move(in));
}

absl::Status PushReceiver::OnPiece(PushGradPieceInput piece) {
  if (finished_) {
    return absl::InvalidArgumentError(
        "PushGrad: a message arrived after the commit; the commit must be last");
  }
  if (!have_header_) {
    return absl::InvalidArgumentError(
        "PushGrad: a piece arrived before the header");
  }
  const v1::DType wire = static_cast<v1::DType>(piece.dtype);
  if (wire != v1::DTYPE_FP32 && wire != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: piece at offset ", piece.offset, " has dtype ",
        v1::DType_IsValid(piece.dtype) ? v1::DType_Name(wire)
                                       : absl::StrCat(piece.dtype),
        "; want DTYPE_FP32 or DTYPE_BF16"));
  }
  ASSIGN_OR_RETURN(const DType dtype, FromProto(wire));
  const size_t esize = DTypeSize(dtype);
  const size_t bytes = piece.bytes;
  if (bytes > kMaxPiecePayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: piece at offset ", piece.offset, " carries ", bytes,
        " bytes, more than the limit of ", kMaxPiecePayloadBytes,
        " per message; split it"));
  }
  if (bytes == 0 || bytes % esize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: piece at offset ", piece.offset, " carries ", bytes,
        " bytes, not a positive multiple of ", esize, " (", DTypeName(dtype),
        ")"));
  }
  const uint64_t n = bytes / esize;
  RETURN_IF_ERROR(state_->CheckOwned(piece.offset, n, "PushGrad: piece"));
  RETURN_IF_ERROR(state_->CheckPusher(header_.worker(), piece.offset, n));
  const FlatRange range{piece.offset, piece.offset + n};
  // Overlap with another piece of this stream: the neighbour before and the
  // one at or after range.begin.
  auto next = ranges_.lower_bound(range.begin);
  bool overlap = next != ranges_.end() && next->first < range.end;
  if (next != ranges_.begin() && std::prev(next)->second > range.begin) {
    overlap = true;
  }
  if (overlap) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: piece [", range.begin, ", ", range.end,
        ") overlaps another piece of the same stream"));
  }
  payload_bytes_ += bytes;
  Buffered parts = SplitIntoParts(range, dtype, piece);
  // A step known to be skipped applies nothing: its values need no check.
  if (!(header_.coefficient_known() && header_.skip())) Scan(range, parts.parts);
  if (header_.coefficient_known()) {
    if (!header_.skip()) RETURN_IF_ERROR(CheckMagnitude(header_.coefficient()));
    RETURN_IF_ERROR(
        Apply(known_, parts.parts));
    ranges_.emplace(range.begin, range.end);
    return absl::OkStatus();
  }
  if (!state_->TryReservePushBytes(bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "PushGrad: buffering piece [", range.begin, ", ", range.end, ") (",
        bytes, " bytes) would bring the gradient bytes awaiting a commit on "
        "this server over its limit of ", state_->pending_grad_limit(),
        " (", state_->pending_grad_bytes(),
        " pending; --max_pending_grad_mib); nothing of this stream is applied"));
  }
  ranges_.emplace(range.begin, range.end);
  buffered_.push_back(std::move(parts));
  buffered_bytes_ += bytes;
  return absl::OkStatus();
}

PushReceiver::Buffered PushReceiver::SplitIntoParts(
    FlatRange range, DType dtype, PushGradPieceInput& piece) {
  const size_t esize = DTypeSize(dtype);
  Buffered out;
  // At most one stitched element per boundary between segments; reserved up
  // front so that pointers into `stitched` stay put.
  out.stitched.reserve(piece.segments.size());
  uint64_t elem = range.begin;  // the next element to emit
  size_t carried = 0;           // bytes of a split element gathered so far
  uint32_t partial = 0;
  for (const auto& [p, n] : piece.segments) {
    const uint8_t* at = p;
    size_t left = n;
    if (carried > 0) {
      const size_t take = std::min(esize - carried, left);
      std::memcpy(reinterpret_cast<uint8_t*>(&partial) + carried, at, take);
      carried += take;
      at += take;
      left -= take;
      if (carried < esize) continue;
      out.stitched.push_back(partial);
      out.parts.push_back(
          {{elem, elem + 1}, dtype, &out.stitched.back()});
      ++elem;
      carried = 0;
    }
    const size_t whole = left / esize;
    if (whole > 0) {
      out.parts.push_back({{elem, elem + whole}, dtype, at});
      elem += whole;
      at += whole * esize;
      left -= whole * esize;
    }
    if (left > 0) {
      partial = 0;
      std::memcpy(&partial, at, left);
      carried = left;
    }
  }
  out.owner = std::move(piece.owner);
  return out;
}

absl::Status PushReceiver::OnCommit(const v1::PushGradCommit& commit) {
  if (!have_header_) {
    return absl::InvalidArgumentError(
        "PushGrad: a commit arrived before the header");
  }
  if (header_.coefficient_known()) {
    return absl::InvalidArgumentError(
        "PushGrad: a commit arrived although the header carried the "
        "coefficient (coefficient_known); no commit may follow");
  }
  RETURN_IF_ERROR(ValidateCoefficient(commit.coefficient()));
  if (!commit.skip()) RETURN_IF_ERROR(CheckMagnitude(commit.coefficient()));
  ASSIGN_OR_RETURN(std::vector<StepSetting> settings,
                   SettingsFromProto(commit.group_settings()));
  StepParams params{commit.coefficient(), commit.skip(), std::move(settings)};
  std::vector<GradPiece> pieces;
  pieces.reserve(buffered_.size());
  for (const Buffered& b : buffered_) {
    pieces.insert(pieces.end(), b.parts.begin(), b.parts.end());
  }
  if (commit.prepare()) {
    // Held whole until ApplyStep: the pieces' data moves with the buffers
    // (a vector's move keeps its elements where they are).
    RETURN_IF_ERROR(state_->CheckParams(header_.step(), params));
    PreparedPush push;
    push.step = header_.step();
    push.attempt = header_.attempt();
    push.worker = header_.worker();
    push.params = params;
    push.pieces = std::move(pieces);
    push.holder = std::make_shared<std::vector<Buffered>>(std::move(buffered_));
    push.pending_bytes = buffered_bytes_;
    buffered_.clear();
    buffered_bytes_ = 0;  // the prepared push releases them
    finished_ = true;
    ASSIGN_OR_RETURN(const uint64_t duplicates,
                     state_->Prepare(std::move(push)));
    response_.set_duplicate_elems(duplicates);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(state_->CheckParams(header_.step(), params));
  RETURN_IF_ERROR(Apply(params, pieces));
  FreeBuffers();
  finished_ = true;
  return absl::OkStatus();
}

void PushReceiver::Scan(FlatRange range, const std::vector<GradPiece>& parts) {
  uint32_t bits = 0;
  bool bf16 = false;
  for (const GradPiece& p : parts) {
    bf16 = p.dtype == DType::kBf16;
    bits = std::max(
        bits, ScanGrad({p.data, bf16}, p.range.size()).max_abs_bits);
  }
  const GradScan scan{bits, bf16};
  if (!scan.finite()) {
    if (nonfinite_) return;
    nonfinite_ = true;
    nonfinite_piece_ = range;
    for (const GradPiece& p : parts) {
      const size_t i = FirstNonFinite({p.data, bf16}, p.range.size());
      if (i < p.range.size()) {
        nonfinite_at_ = p.range.begin + i;
        break;
      }
    }
  } else if (scan.max_abs() > max_abs_) {
    max_abs_ = scan.max_abs();
    max_abs_piece_ = range;
  }
}

absl::Status PushReceiver::CheckMagnitude(double coefficient) const {
  if (nonfinite_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: step ", header_.step(), " from worker ", header_.worker(),
        ": the gradient holds NaN or Inf at ",
        state_->DescribeElement(nonfinite_at_), ", in the piece [",
        nonfinite_piece_.begin, ", ", nonfinite_piece_.end,
        "); a step that is not skipped must be finite (an overflow is pushed "
        "with skip); nothing of this stream is applied"));
  }
  if (static_cast<double>(max_abs_) * coefficient > kMaxScaledGrad) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: step ", header_.step(), " from worker ", header_.worker(),
        ": the gradient piece [", max_abs_piece_.begin, ", ",
        max_abs_piece_.end, ") (from ",
        state_->DescribeElement(max_abs_piece_.begin), ") holds |g| = ",
        max_abs_, ", which the coefficient ", coefficient,
        " scales past 2^60: its square would overflow the optimizer's second "
        "moment; nothing of this stream is applied"));
  }
  return absl::OkStatus();
}

absl::Status PushReceiver::Apply(const StepParams& params,
                                    absl::Span<const GradPiece> pieces) {
  ASSIGN_OR_RETURN(ApplyResult r,
                   state_->ApplyPush(header_.step(), params, pieces,
                                     header_.attempt()));
  response_.set_applied_elems(response_.applied_elems() + r.applied_elems);
  response_.set_duplicate_elems(response_.duplicate_elems() +
                                r.duplicate_elems);
  response_.set_chunks_completed(response_.chunks_completed() +
                                 r.chunks_completed);
  return absl::OkStatus();
}

absl::Status PushReceiver::OnEndOfStream() {
  if (finished_) return absl::OkStatus();
  if (!have_header_) {
    return absl::InvalidArgumentError(
        "PushGrad: the stream ended without a header");
  }
  if (header_.coefficient_known()) {
    finished_ = true;
    return absl::OkStatus();
  }
  FreeBuffers();
  return absl::InvalidArgumentError(absl::StrCat(
      "PushGrad: the stream for step ", header_.step(), " from worker ",
      header_.worker(), " ended before its commit; nothing was applied"));
}

}  // namespace zeroshard
