// OpTimer: where a device step's time goes, op by op, timed on the stream
// itself. Between Start() and Finish() each Mark(label) records a CUDA event
// after the work enqueued so far; the interval since the previous mark is
// `label`'s. Finish() waits for the stream and sums each label's intervals.
// The kernels' and the model's code marks a timer only when one is set
// (null by default, so the step pays nothing); zeroshard-bench device-gpt
// times one step with it and prints the table, so that a run on a device
// shows which op to work on next.
//
//   OpTimer timer;
//   RETURN_IF_ERROR(timer.Start(stream));
//   ... LayerNormForward(..., stream); timer.Mark("layernorm fwd"); ...
//   ASSIGN_OR_RETURN(std::vector<OpTime> times, timer.Finish());
//
// One stream, one thread; labels must be string literals (kept by pointer).
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_OP_TIMER_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_OP_TIMER_H_

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard::kernels::cuda {

struct OpTime {
  std::string label;
  double ms = 0;   // summed over the label's intervals
  int calls = 0;   // intervals
};

class OpTimer {
 public:
  OpTimer() = default;
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Begins a span on `stream` (any earlier one is dropped).
  absl::Status Start(cudaStream_t stream);
  // The work enqueued on the stream since the previous mark is `label`'s.
  // A no-op outside a span; an event that cannot be recorded makes Finish
  // fail.
  void Mark(const char* label);
  // Waits for the stream and returns each label's time, in the order the
  // labels first appeared; ends the span.
  absl::StatusOr<std::vector<OpTime>> Finish();

 private:
  cudaStream_t stream_ = nullptr;
  bool running_ = false;
  absl::Status error_;
  std::vector<cudaEvent_t> events_;  // created on demand, reused
  size_t used_ = 0;                  // events recorded in this span
  std::vector<const char*> labels_;  // labels_[i]: events i..i+1
};

// Marks `timer` when it is set.
inline void MarkOp(OpTimer* timer, const char* label) {
  if (timer != nullptr) timer->Mark(label);
}

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_OP_TIMER_H_
