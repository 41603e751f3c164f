// Fails streams that have been idle too long: one thread per server that,
// a few times per timeout, asks every registered stream whether it has
// waited longer than the timeout for its next message, and expires those
// that have.
//
//   IdleStreams idle(absl::Seconds(60));   // infinite: no thread, no expiry
//   idle.Add(reactor);     // in the reactor's constructor
//   ...                    // TakeIfIdle, then Expire, from the thread
//   idle.Remove(reactor);  // in OnDone, before dropping its reference
//
// TakeIfIdle runs under the registry's lock, and Remove takes it, so a
// stream is never asked while or after it is deleted; a stream that says
// yes holds itself alive (a reference) until its Expire, which runs
// outside the lock (it may finish the call, and gRPC may then run OnDone).
#ifndef ZEROSHARD_SERVER_IDLE_STREAMS_H_
#define ZEROSHARD_SERVER_IDLE_STREAMS_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zeroshard {

class IdleStreams {
 public:
  class Stream {
   public:
    virtual ~Stream() = default;
    // True when the stream has waited for a message since before
    // `now - timeout` and is not finished; it then keeps itself alive until
    // Expire. Cheap; must not call Add or Remove.
    virtual bool TakeIfIdle(absl::Time now, absl::Duration timeout) = 0;
    // Fails the stream (unless it finished meanwhile) and drops the
    // reference TakeIfIdle took.
    virtual void Expire(absl::Duration timeout) = 0;
  };

  // A timeout <= 0 or infinite disables expiry (and the thread).
  explicit IdleStreams(absl::Duration timeout);
  ~IdleStreams();
  IdleStreams(const IdleStreams&) = delete;
  IdleStreams& operator=(const IdleStreams&) = delete;

  absl::Duration timeout() const { return timeout_; }
  void Add(Stream* stream);
  void Remove(Stream* stream);

 private:
  void Sweep();

  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_set<Stream*> streams_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_IDLE_STREAMS_H_
