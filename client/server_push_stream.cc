#include "client/server_push_stream.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/generic_call.h"
#include "wire/grpc_status.h"
#include "wire/proto_buffer.h"
#include "wire/proto_convert.h"
#include "wire/push_grad_codec.h"

namespace zeroshard {
namespace {

constexpr char kPushGradMethod[] = "/zeroshard.v1.ShardService/PushGrad";

}  // namespace

ServerPushStream::ServerPushStream(const ShardChannels* channels, int slot,
                                   int server, uint64_t step, uint32_t worker,
                                   std::optional<StepCommit> known)
    : channels_(channels),
      slot_(slot),
      server_(server),
      step_(step),
      worker_(worker),
      known_(known),
      what_(absl::StrCat("PushGrad(step ", step, ", worker ", worker, ")")),
      result_(absl::UnknownError("not finished")) {
  thread_ = std::thread([this] { Run(); });
}

ServerPushStream::~ServerPushStream() {
  Cancel();
  if (!joined_) thread_.join();
}

void ServerPushStream::Enqueue(const std::vector<QueuedPiece>& pieces) {
  absl::MutexLock lock(&mu_);
  pieces_.insert(pieces_.end(), pieces.begin(), pieces.end());
}

void ServerPushStream::Close(const StepCommit& commit) {
  absl::MutexLock lock(&mu_);
  commit_ = commit;
}

void ServerPushStream::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

absl::StatusOr<v1::PushGradResponse> ServerPushStream::Wait() {
  if (!joined_) {
    thread_.join();
    joined_ = true;
  }
  return result_;
}

absl::Status ServerPushStream::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void ServerPushStream::Run() {
  v1::PushGradResponse response;
  absl::Status s =
      RunWithRetry(channels_->options().retry, [&] { return Attempt(&response); },
                   channels_->channel(server_).get());
  absl::MutexLock lock(&mu_);
  if (s.ok()) {
    result_ = response;
  } else {
    result_ = s;
    error_ = s;
  }
}

absl::Status ServerPushStream::Attempt(v1::PushGradResponse* response) {
  const ShardClientOptions& opt = channels_->options();
  const std::string& address = channels_->address(server_);
  const absl::Time deadline = absl::Now() + opt.call_timeout;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  channels_->RouteTo(&ctx, slot_, server_);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) {
      return absl::CancelledError(
          absl::StrCat(what_, " to ", address, ": cancelled"));
    }
    context_ = &ctx;
  }
  // Cancelled too when the server is left (ShardChannels::MarkDown).
  const ScopedCall until_left(channels_->leaving(server_), &ctx);
  if (!until_left.registered()) {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    return absl::CancelledError(
        absl::StrCat(what_, " to ", address, ": the server was left"));
  }
  // The tracker is shared with every slice still referencing caller data
  // (wire/push_grad_codec.h), so it outlives whatever gRPC still holds.
  auto in_flight = std::make_shared<InFlightBytes>();
  // The region's push area, when no other stream holds it: this stream's
  // pieces are written there one after the other while they fit (`used`
  // bytes so far), the rest goes over gRPC. Held until the reply, by which
  // time the server has read or copied every piece.
  // A copy of another slot is written over gRPC.
  const std::shared_ptr<const ServerRegion> region =
      slot_ == server_ ? ServerRegion::TakePush(channels_->region(server_))
                       : nullptr;
  uint64_t used = 0;
  *response = v1::PushGradResponse();
  GenericStreamCall call(channels_->channel(server_), kPushGradMethod, &ctx);

  v1::PushGradMessage header;
  header.mutable_header()->set_step(step_);
  header.mutable_header()->set_worker(worker_);
  header.mutable_header()->set_attempt(channels_->options().attempt);
  header.mutable_header()->set_run_id(channels_->options().run_id);
  if (known_.has_value()) {
    header.mutable_header()->set_coefficient_known(true);
    header.mutable_header()->set_coefficient(known_->coefficient);
    header.mutable_header()->set_skip(known_->skip);
    for (const StepSetting& g : known_->settings) {
      SettingToProto(g, header.mutable_header()->add_group_settings());
    }
  }
  absl::Status local;  // an error found on this side
  bool ok = call.Write(ProtoToByteBuffer(header));
  size_t next = 0;
  while (ok) {
    QueuedPiece piece;
    std::optional<StepCommit> commit;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return cancelled_ || next < pieces_.size() || commit_.has_value();
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
        local = absl::DeadlineExceededError(absl::StrCat(
            what_, " to ", address, ": not committed within the deadline of ",
            absl::FormatDuration(opt.call_timeout)));
        ctx.TryCancel();
        break;
      }
      if (cancelled_) break;
      if (next < pieces_.size()) {
        piece = pieces_[next++];
        // Through a region, queued pieces that continue each other go as
        // one, up to the servers' limit per piece: fewer messages, and no
        // gRPC message holds the bytes.
        while (region != nullptr && next < pieces_.size() &&
               pieces_[next].dtype == piece.dtype &&
               pieces_[next].offset ==
                   piece.offset + piece.bytes / DTypeSize(piece.dtype) &&
               pieces_[next].data ==
                   static_cast<const uint8_t*>(piece.data) + piece.bytes &&
               piece.bytes + pieces_[next].bytes <= kMaxPiecePayloadBytes &&
               used + piece.bytes + pieces_[next].bytes <=
                   region->push_bytes()) {
          piece.bytes += pieces_[next++].bytes;
        }
      } else {
        commit = commit_;
      }
    }
    if (commit.has_value()) {
      if (!known_.has_value()) {
        v1::PushGradMessage msg;
        msg.mutable_commit()->set_coefficient(commit->coefficient);
        msg.mutable_commit()->set_skip(commit->skip);
        msg.mutable_commit()->set_prepare(commit->prepare);
        for (const StepSetting& g : commit->settings) {
          SettingToProto(g, msg.mutable_commit()->add_group_settings());
        }
        ok = call.WriteLast(ProtoToByteBuffer(msg));
      } else {
        ok = call.WritesDone();
      }
      break;
    }
    if (region != nullptr && used + piece.bytes <= region->push_bytes()) {
      // Written after the stream's earlier pieces, then named.
      const uint64_t at = region->push_offset() + used;
      used += piece.bytes;
      std::memcpy(region->at(at), piece.data, piece.bytes);
      v1::PushGradMessage msg;
      v1::PushGradRegionPiece* p = msg.mutable_region_piece();
      p->set_offset(piece.offset);
      p->set_dtype(ToProto(piece.dtype));
      p->set_region(region->id());
      p->set_region_offset(at);
      p->set_bytes(piece.bytes);
      ok = call.Write(ProtoToByteBuffer(msg));
      continue;
    }
    if (!in_flight->WaitForRoom(piece.bytes, opt.max_bytes_in_flight,
                                deadline)) {
      local = absl::DeadlineExceededError(absl::StrCat(
          what_, " to ", address, ": transport did not drain within ",
          absl::FormatDuration(opt.call_timeout)));
      ctx.TryCancel();
      break;
    }
    ok = call.Write(EncodePushPiece(piece.offset, piece.dtype, piece.data,
                                    piece.bytes, in_flight));
  }
  // The reply: read whenever this side found no error, also after a failed
  // write (the server may have replied and ended the call first); a broken
  // or cancelled stream returns at once, and Finish then has the status.
  grpc::ByteBuffer reply;
  const bool replied = local.ok() && call.Read(&reply);
  grpc::Status st = call.Finish();
  if (st.ok() && (!replied || !ParseProtoFromByteBuffer(reply, response))) {
    st = grpc::Status(grpc::StatusCode::INTERNAL,
                      "the reply does not parse as a PushGradResponse");
  }
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  if (!local.ok()) return local;
  return FromGrpcStatus(st, what_, address);
}

}  // namespace zeroshard
