#include "client/catch_up.h"

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {
namespace {

// Server k's two slots: its own and the one before it.
std::array<int, 2> SlotsOf(const ShardChannels& channels, int k) {
  const int S = channels.size();
  return {k, (k + S - 1) % S};
}

absl::StatusOr<int> LiveOther(const ShardChannels& channels, int slot, int k) {
  const int other = OtherHolder(channels, slot, k);
  if (channels.IsDown(other)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slot ", slot, "'s other copy, on server ", other, " (",
        channels.address(other), "), is left too: no copy to catch up from"));
  }
  return other;
}

absl::Status StepLogCall(const ShardChannels& channels, int slot, int server,
                         v1::StepLogRequest::Action action,
                         uint64_t from_step) {
  v1::StepLogRequest req;
  req.set_action(action);
  req.set_from_step(from_step);
  req.set_run_id(channels.options().run_id);
  grpc::ClientContext ctx;
  channels.PrepareControlContext(&ctx);
  channels.RouteTo(&ctx, slot, server);
  std::unique_ptr<grpc::ClientReader<v1::PushGradMessage>> reader =
      channels.stub(server).StepLog(&ctx, req);
  v1::PushGradMessage ignored;
  while (reader->Read(&ignored)) {
  }
  return FromGrpcStatus(reader->Finish(), "StepLog", channels.address(server));
}

// The lowest chunk version of server k's copy of `slot`.
absl::StatusOr<uint64_t> CopyVersion(const ShardChannels& channels, int slot,
                                     int k) {
  grpc::ClientContext ctx;
  channels.PrepareControlContext(&ctx);
  channels.RouteTo(&ctx, slot, k);
  v1::InspectResponse resp;
  RETURN_IF_ERROR(FromGrpcStatus(
      channels.stub(k).Inspect(&ctx, v1::InspectRequest(), &resp), "Inspect",
      channels.address(k)));
  if (!resp.initialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", k, " (", channels.address(k),
                     ") holds no copy of slot ", slot, " (not initialised)"));
  }
  return resp.min_version();
}

// Reads `other`'s log of `slot` from `from` and writes it into k's copy.
absl::StatusOr<uint64_t> ReplayOne(const ShardChannels& channels, int slot,
                                   int other, int k, uint64_t from) {
  v1::StepLogRequest req;
  req.set_action(v1::StepLogRequest::READ);
  req.set_from_step(from);
  req.set_run_id(channels.options().run_id);
  // A log may hold up to a copy's state bytes: the copy is a bulk stream,
  // bounded as a push stream is (call_timeout), not as a small call.
  const auto deadline =
      absl::ToChronoTime(absl::Now() + channels.options().call_timeout);
  grpc::ClientContext read_ctx;
  read_ctx.set_deadline(deadline);
  channels.RouteTo(&read_ctx, slot, other);
  grpc::ClientContext write_ctx;
  write_ctx.set_deadline(deadline);
  channels.RouteTo(&write_ctx, slot, k);
  v1::ReplayResponse reply;
  std::unique_ptr<grpc::ClientReader<v1::PushGradMessage>> reader =
      channels.stub(other).StepLog(&read_ctx, req);
  std::unique_ptr<grpc::ClientWriter<v1::PushGradMessage>> writer =
      channels.stub(k).Replay(&write_ctx, &reply);
  v1::PushGradMessage msg;
  bool written = true;
  while (written && reader->Read(&msg)) written = writer->Write(msg);
  if (!written) {
    // The replay ended early (a refusal): its status says why; the log
    // stream, cancelled here, ends CANCELLED, which says nothing.
    read_ctx.TryCancel();
    while (reader->Read(&msg)) {
    }
    reader->Finish().ok();
    absl::Status s =
        FromGrpcStatus(writer->Finish(), "Replay", channels.address(k));
    if (s.ok()) {
      s = absl::UnavailableError(
          absl::StrCat("Replay to ", channels.address(k),
                       ": the stream ended before the log was written"));
    }
    return s;
  }
  const absl::Status read =
      FromGrpcStatus(reader->Finish(), "StepLog", channels.address(other));
  if (!read.ok()) {
    write_ctx.TryCancel();
    writer->Finish().ok();  // the read's error is the one to report
    return read;
  }
  writer->WritesDone();
  RETURN_IF_ERROR(
      FromGrpcStatus(writer->Finish(), "Replay", channels.address(k)));
  return reply.version();
}

}  // namespace

int OtherHolder(const ShardChannels& channels, int slot, int k) {
  const int S = channels.size();
  return k == slot ? (slot + 1) % S : slot;
}

absl::Status OpenStepLogs(const ShardChannels& channels, int k,
                          uint64_t from_step) {
  for (int slot : SlotsOf(channels, k)) {
    ASSIGN_OR_RETURN(const int other, LiveOther(channels, slot, k));
    RETURN_IF_ERROR(StepLogCall(channels, slot, other, v1::StepLogRequest::OPEN,
                                from_step));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReplayStepLogs(const ShardChannels& channels, int k) {
  uint64_t lowest = UINT64_MAX;
  for (int slot : SlotsOf(channels, k)) {
    ASSIGN_OR_RETURN(const int other, LiveOther(channels, slot, k));
    ASSIGN_OR_RETURN(const uint64_t from, CopyVersion(channels, slot, k));
    ASSIGN_OR_RETURN(const uint64_t version,
                     ReplayOne(channels, slot, other, k, from));
    lowest = std::min(lowest, version);
  }
  return lowest;
}

void CloseStepLogs(const ShardChannels& channels, int k) {
  for (int slot : SlotsOf(channels, k)) {
    const int other = OtherHolder(channels, slot, k);
    StepLogCall(channels, slot, other, v1::StepLogRequest::CLOSE, 0)
        .IgnoreError();
  }
}

}  // namespace zeroshard
