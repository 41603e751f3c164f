#include "client/call_canceller.h"

#include <algorithm>

#include <grpcpp/client_context.h>

namespace zeroshard {

void CallCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (const auto& [c, since] : active_) c->TryCancel();
}

absl::Time CallCanceller::OldestCall() const {
  absl::MutexLock lock(&mu_);
  absl::Time oldest = absl::InfiniteFuture();
  for (const auto& [c, since] : active_) oldest = std::min(oldest, since);
  return oldest;
}

}  // namespace zeroshard
