// CommQueue: one background thread that runs a worker's communication tasks
// (collectives, pushes) in submission order, so that they overlap with the
// compute thread while every rank still issues its collectives in the same
// order.
//
//   CommQueue queue;
//   CommTicket t = queue.Submit([&] { return group->AllGatherInPlace(buf); });
//   ... compute ...
//   RETURN_IF_ERROR(t.Wait());
//
// Contracts: tasks run one at a time, first in first out. After a task
// fails, every later task is not run and returns FAILED_PRECONDITION carrying
// the first error (a broken group must not be used again). The destructor
// waits for queued tasks to finish.
#ifndef ZEROSHARD_WORKER_ENGINE_COMM_QUEUE_H_
#define ZEROSHARD_WORKER_ENGINE_COMM_QUEUE_H_

#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

// The result of one submitted task.
class CommTicket {
 public:
  CommTicket() = default;
  explicit CommTicket(std::shared_future<absl::Status> f) : f_(std::move(f)) {}
  bool valid() const { return f_.valid(); }
  // Blocks until the task ran; OK for a default-constructed ticket.
  absl::Status Wait() const { return f_.valid() ? f_.get() : absl::OkStatus(); }

 private:
  std::shared_future<absl::Status> f_;
};

class CommQueue {
 public:
  CommQueue();
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  CommTicket Submit(std::function<absl::Status()> task);
  // Waits until every task submitted so far has run; returns the first error.
  absl::Status Drain();

 private:
  struct Item {
    std::function<absl::Status()> task;
    std::promise<absl::Status> done;
  };
  void Run();

  absl::Mutex mu_;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  CommTicket last_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_COMM_QUEUE_H_
