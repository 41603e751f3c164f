#include "client/copy_audit.h"

#include <utility>

namespace zeroshard {

CopyAudit::~CopyAudit() { Join(); }

bool CopyAudit::Due(uint64_t step) const {
  return cluster_->options().replicas >= 2 && every_ > 0 && step > 0 &&
         step % every_ == 0;
}

void CopyAudit::Join() {
  if (!running_.joinable()) return;
  running_.join();
  ++compared_;
  // The first failure is kept until a Finish reports it.
  if (pending_.ok()) pending_ = std::move(verdict_);
  verdict_ = absl::OkStatus();
}

void CopyAudit::Start(uint64_t step) {
  if (!Due(step)) return;
  Join();
  running_ = std::thread([this] { verdict_ = cluster_->CheckCopiesAgree(); });
}

absl::Status CopyAudit::Finish() {
  Join();
  return std::exchange(pending_, absl::OkStatus());
}

}  // namespace zeroshard
