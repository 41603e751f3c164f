#include "client/apply_step.h"

#include <vector>

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {

namespace {

absl::Status ApplyStepCall(const ShardChannels& channels, int k, uint64_t step,
                           uint64_t attempt, absl::Duration timeout,
                           v1::ApplyStepResponse* response) {
  v1::ApplyStepRequest req;
  req.set_step(step);
  req.set_attempt(attempt);
  req.set_run_id(channels.options().run_id);
  return RunWithRetry(channels.options().retry, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return FromGrpcStatus(channels.stub(k).ApplyStep(&ctx, req, response),
                          "ApplyStep", channels.address(k));
  }, channels.channel(k).get());
}

}  // namespace

absl::Status ApplyStepOn(const ShardChannels& channels, int k, uint64_t step,
                         uint64_t attempt, absl::Duration timeout) {
  v1::ApplyStepResponse resp;
  return ApplyStepCall(channels, k, step, attempt, timeout, &resp);
}

absl::StatusOr<PushResult> ApplyStepAll(const ShardChannels& channels,
                                        uint64_t step, uint64_t attempt,
                                        absl::Duration timeout) {
  std::vector<v1::ApplyStepResponse> out(channels.size());
  RETURN_IF_ERROR(RunInParallel(channels.size(), [&](int k) {
    return ApplyStepCall(channels, k, step, attempt, timeout, &out[k]);
  }));
  PushResult sum;
  for (int k = 0; k < channels.size(); ++k) {
    sum.applied_elems += out[k].applied_elems();
    sum.duplicate_elems += out[k].duplicate_elems();
    sum.chunks_completed += out[k].chunks_completed();
    ++sum.streams;
  }
  return sum;
}

}  // namespace zeroshard
