// OptimizerPool: a small persistent thread pool that runs one tiled loop at a
// time over [0, n), the calling thread included. Tiles are handed out
// dynamically (an atomic cursor), so a thread slowed by a noisy neighbour
// takes fewer of them.
//
//   OptimizerPool pool(/*threads=*/4);
//   pool.ParallelFor(n, /*tile=*/1 << 15, [&](size_t lo, size_t hi) {
//     kernel(lo, hi);
//   });
//
// Contracts: ParallelFor returns after fn has run on every tile exactly once.
// It is thread-safe; a call that finds the pool busy with another caller's
// loop runs its whole loop on its own thread instead of waiting. fn must not
// call back into the same pool. Destruction joins the threads and must not
// overlap a ParallelFor.
#ifndef ZEROSHARD_OPTIM_OPTIMIZER_POOL_H_
#define ZEROSHARD_OPTIM_OPTIMIZER_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

class OptimizerPool {
 public:
  // threads >= 1 counts the caller: threads - 1 helper threads are started.
  explicit OptimizerPool(int threads);
  ~OptimizerPool();
  OptimizerPool(const OptimizerPool&) = delete;
  OptimizerPool& operator=(const OptimizerPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(lo, hi) for consecutive tiles [lo, hi) covering [0, n); each
  // tile has `tile` elements (>= 1) except possibly the last.
  void ParallelFor(size_t n, size_t tile,
                   absl::FunctionRef<void(size_t, size_t)> fn);

 private:
  struct Loop {
    size_t n;
    size_t tile;
    absl::FunctionRef<void(size_t, size_t)> fn;
    std::atomic<size_t> next{0};
  };
  static void RunTiles(Loop& loop);
  void HelperMain();

  absl::Mutex run_mu_;  // held by the caller that owns the helpers
  absl::Mutex mu_;
  Loop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_helpers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;  // constant after construction
};

// The process's pool for the optimizer rules' updates (OptimizerThreads()
// threads, created on first use, never destroyed: helpers may still be
// parked at exit).
OptimizerPool& SharedOptimizerPool();

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_OPTIMIZER_POOL_H_
