#include "client/apply_step.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {

namespace {

// ApplyStep of slot `slot` on server k (one of its copies).
absl::Status ApplyStepCall(const ShardChannels& channels, int slot, int k,
                           uint64_t step, uint64_t attempt,
                           absl::Duration timeout,
                           v1::ApplyStepResponse* response) {
  v1::ApplyStepRequest req;
  req.set_step(step);
  req.set_attempt(attempt);
  req.set_run_id(channels.options().run_id);
  return RunWithRetry(channels.options().retry, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    channels.RouteTo(&ctx, slot, k);
    // Cancelled when server k is left meanwhile (ShardChannels::MarkDown).
    const ScopedCall until_left(channels.leaving(k), &ctx);
    if (!until_left.registered()) {
      return absl::CancelledError(absl::StrCat(
          "ApplyStep(step ", step, ") to ", channels.address(k),
          ": the server was left"));
    }
    return FromGrpcStatus(channels.stub(k).ApplyStep(&ctx, req, response),
                          "ApplyStep", channels.address(k));
  }, channels.channel(k).get());
}

}  // namespace

absl::Status ApplyStepOn(const ShardChannels& channels, int k, uint64_t step,
                         uint64_t attempt, absl::Duration timeout) {
  v1::ApplyStepResponse resp;
  return ApplyStepCall(channels, k, k, step, attempt, timeout, &resp);
}

absl::StatusOr<PushResult> ApplyStepAll(const ShardChannels& channels,
                                        uint64_t step, uint64_t attempt,
                                        absl::Duration timeout) {
  std::vector<v1::ApplyStepResponse> out(channels.size());
  // Every copy of every slot; a slot's sums are its first copy's (each
  // copy applies the same pushes).
  RETURN_IF_ERROR(RunInParallel(channels.size(), [&](int slot) {
    absl::Mutex mu;
    bool counted = false;
    return channels.OnEveryCopy(slot, [&](int k) {
      v1::ApplyStepResponse r;
      RETURN_IF_ERROR(
          ApplyStepCall(channels, slot, k, step, attempt, timeout, &r));
      absl::MutexLock lock(&mu);
      if (!counted) out[slot] = r;
      counted = true;
      return absl::OkStatus();
    });
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
