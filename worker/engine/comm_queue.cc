#include "worker/engine/comm_queue.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

CommQueue::CommQueue() : thread_([this] { Run(); }) {}

CommQueue::~CommQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

CommTicket CommQueue::Submit(std::function<absl::Status()> task) {
  Item item{std::move(task), std::promise<absl::Status>()};
  CommTicket ticket(item.done.get_future().share());
  absl::MutexLock lock(&mu_);
  items_.push_back(std::move(item));
  last_ = ticket;
  return ticket;
}

absl::Status CommQueue::Drain() {
  CommTicket last;
  {
    absl::MutexLock lock(&mu_);
    last = last_;
  }
  absl::Status s = last.Wait();
  absl::MutexLock lock(&mu_);
  if (!first_error_.ok()) return first_error_;
  return s;
}

void CommQueue::Run() {
  for (;;) {
    Item item;
    absl::Status previous;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || !items_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (items_.empty()) return;  // stop_ and nothing left
      item = std::move(items_.front());
      items_.pop_front();
      previous = first_error_;
    }
    absl::Status s;
    if (!previous.ok()) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "not run after an earlier communication error: ", previous.message()));
    } else {
      s = item.task();
    }
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      if (first_error_.ok()) first_error_ = s;
    }
    item.done.set_value(s);
  }
}

}  // namespace zeroshard
