#include "model/kernels/cuda/op_timer.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "common/cuda_status.h"

namespace zeroshard::kernels::cuda {

OpTimer::~OpTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::Status OpTimer::Start(cudaStream_t stream) {
  stream_ = stream;
  running_ = true;
  error_ = absl::OkStatus();
  used_ = 0;
  labels_.clear();
  Mark(nullptr);  // the span's first event
  return error_;
}

void OpTimer::Mark(const char* label) {
  if (!running_ || !error_.ok()) return;
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    error_ = CudaStatus(cudaEventCreate(&e), "OpTimer: creating an event");
    if (!error_.ok()) {
      // Finish reports it; the model's next launch check must not.
      (void)cudaGetLastError();
      return;
    }
    events_.push_back(e);
  }
  error_ = CudaStatus(cudaEventRecord(events_[used_], stream_),
                      "OpTimer: recording an event");
  if (!error_.ok()) {
    (void)cudaGetLastError();
    return;
  }
  if (used_ > 0) labels_.push_back(label);
  ++used_;
}

absl::StatusOr<std::vector<OpTime>> OpTimer::Finish() {
  running_ = false;
  if (!error_.ok()) return error_;
  std::vector<OpTime> out;
  if (used_ < 2) return out;
  // The span's work, waited for within kWait (a stuck kernel is an error,
  // not a hang).
  constexpr absl::Duration kWait = absl::Seconds(120);
  const absl::Time deadline = absl::Now() + kWait;
  while (true) {
    const cudaError_t e = cudaEventQuery(events_[used_ - 1]);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      return CudaStatus(e, "OpTimer: waiting for the stream");
    }
    (void)cudaGetLastError();  // "not ready" is not an error to keep
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "OpTimer: the stream did not finish within ",
          absl::FormatDuration(kWait)));
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i + 1 < used_; ++i) {
    float ms = 0;
    if (absl::Status s = CudaStatus(
            cudaEventElapsedTime(&ms, events_[i], events_[i + 1]),
            "OpTimer: reading an interval");
        !s.ok()) {
      return s;
    }
    const std::string label = labels_[i] != nullptr ? labels_[i] : "(unmarked)";
    auto [it, inserted] = index.emplace(label, out.size());
    if (inserted) out.push_back({label, 0, 0});
    out[it->second].ms += ms;
    ++out[it->second].calls;
  }
  return out;
}

}  // namespace zeroshard::kernels::cuda
