#include "client/call_canceller.h"

#include <grpcpp/client_context.h>

namespace zeroshard {

void CallCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* c : active_) c->TryCancel();
}

}  // namespace zeroshard
