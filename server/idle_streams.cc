#include "server/idle_streams.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"

namespace zeroshard {

IdleStreams::IdleStreams(absl::Duration timeout) : timeout_(timeout) {
  if (timeout_ > absl::ZeroDuration() && timeout_ != absl::InfiniteDuration()) {
    thread_ = std::thread([this] { Sweep(); });
  }
}

IdleStreams::~IdleStreams() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void IdleStreams::Add(Stream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
}

void IdleStreams::Remove(Stream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void IdleStreams::Sweep() {
  // A stream expires between 1 and 1.25 timeouts after its last message.
  const absl::Duration period =
      std::clamp(timeout_ / 4, absl::Milliseconds(10), absl::Seconds(1));
  std::vector<Stream*> idle;
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
    const absl::Time now = absl::Now();
    for (Stream* s : streams_) {
      if (s->TakeIfIdle(now, timeout_)) idle.push_back(s);
    }
    if (idle.empty()) continue;
    mu_.Unlock();
    for (Stream* s : idle) s->Expire(timeout_);
    idle.clear();
    mu_.Lock();
  }
}

}  // namespace zeroshard
