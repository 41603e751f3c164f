// A stand-in for a device's memory, for testing the step engine's
// model-memory path (model/model_memory.h) where no GPU exists: the
// CPU model behind a wrapper that behaves, where the engine can get it
// wrong, as the CUDA model does.
//
// - Memory is host memory (host_addressable, so the Gloo group can work on
//   it), but fresh allocations are filled with NaN, so a gradient buffer the
//   engine forgot to Zero, or a unit read before it was gathered, poisons
//   the weights.
// - The model's gradient writes (and Zero) are deferred like a stream's
//   work: they reach memory only when a Fence taken after them is waited on
//   (or the model is synchronised). A reduce-scatter that does not wait for
//   its fence reads NaN. Fences are ordered: waiting on one applies every
//   earlier one, as a CUDA event does.
// - Every unit, gradient span and copy must lie inside an allocation, every
//   copy's host side inside a pinned range, every allocation must be freed
//   and every range unpinned once: violations() lists what was not.
//
//   StandInRecord record;
//   options.make_model = StandInModelFactory(&record);
//   ... train ...
//   EXPECT_TRUE(record.violations().empty());
#ifndef ZEROSHARD_TESTS_WORKER_ENGINE_MODEL_MEMORY_STAND_IN_H_
#define ZEROSHARD_TESTS_WORKER_ENGINE_MODEL_MEMORY_STAND_IN_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "worker/engine/step_engine.h"
#include "model/model_memory.h"
#include "model/unit_model.h"

namespace zeroshard::testing {

// What every stand-in made by one factory saw (shared by the ranks).
class StandInRecord {
 public:
  void Violation(std::string what);
  std::vector<std::string> violations() const;
  void CountFenceWait() { fence_waits_.fetch_add(1); }
  void CountCopy(uint64_t to_model, uint64_t from_model) {
    to_model_.fetch_add(to_model);
    from_model_.fetch_add(from_model);
  }
  void CountModelCall() { model_calls_.fetch_add(1); }
  uint64_t fence_waits() const { return fence_waits_.load(); }
  uint64_t bytes_to_model() const { return to_model_.load(); }
  uint64_t bytes_from_model() const { return from_model_.load(); }
  uint64_t model_calls() const { return model_calls_.load(); }
  // The memory's timeout when the engine took its last fence.
  void SeeTimeout(absl::Duration t) {
    absl::MutexLock lock(&mu_);
    timeout_ = t;
  }
  absl::Duration timeout() const {
    absl::MutexLock lock(&mu_);
    return timeout_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> fence_waits_{0}, to_model_{0}, from_model_{0},
      model_calls_{0};
};

class StandInMemory;

// A factory of CPU models wrapped as above.
ModelFactory StandInModelFactory(StandInRecord* record);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_WORKER_ENGINE_MODEL_MEMORY_STAND_IN_H_
