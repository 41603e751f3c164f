#include "optim/optimizer_pool.h"

#include <algorithm>

namespace zeroshard {

OptimizerPool::OptimizerPool(int threads) {
  const int helpers = std::max(threads, 1) - 1;
  helpers_.reserve(helpers);
  for (int i = 0; i < helpers; ++i) {
    helpers_.emplace_back([this] { HelperMain(); });
  }
}

OptimizerPool::~OptimizerPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : helpers_) t.join();
}

void OptimizerPool::RunTiles(Loop& loop) {
  for (;;) {
    const size_t lo = loop.next.fetch_add(loop.tile, std::memory_order_relaxed);
    if (lo >= loop.n) return;
    loop.fn(lo, std::min(loop.n, lo + loop.tile));
  }
}

void OptimizerPool::HelperMain() {
  uint64_t seen = 0;
  for (;;) {
    Loop* loop;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this, &seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&wake));
      if (stop_) return;
      seen = generation_;
      loop = loop_;
    }
    RunTiles(*loop);
    absl::MutexLock lock(&mu_);
    --busy_helpers_;
  }
}

void OptimizerPool::ParallelFor(size_t n, size_t tile,
                                absl::FunctionRef<void(size_t, size_t)> fn) {
  tile = std::max<size_t>(tile, 1);
  Loop loop{n, tile, fn};
  if (helpers_.empty() || n <= tile || !run_mu_.TryLock()) {
    RunTiles(loop);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    loop_ = &loop;
    busy_helpers_ = static_cast<int>(helpers_.size());
    ++generation_;
  }
  RunTiles(loop);
  {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return busy_helpers_ == 0;
    };
    mu_.Await(absl::Condition(&done));
    loop_ = nullptr;
  }
  run_mu_.Unlock();
}

}  // namespace zeroshard
