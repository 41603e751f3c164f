// Counters of a shard server's RPCs for Inspect: calls per method, payload
// bytes in and out, failed calls by canonical status code name, and calls
// refused for credentials by method.
//
//   counters.RecordCall("Gather");
//   counters.AddBytesOut(n);
//   counters.RecordResult(status);   // counts an error by code name
//   counters.RecordRefusal("Init", status);  // and an auth refusal by method
//   counters.Fill(response.mutable_counters());
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_RPC_COUNTERS_H_
#define ZEROSHARD_SERVER_RPC_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

class RpcCounters {
 public:
  void RecordCall(absl::string_view method);
  // Counts a non-OK status under its code name ("ABORTED", ...).
  void RecordResult(const absl::Status& status);
  // An UNAUTHENTICATED or PERMISSION_DENIED refusal of `method`: counted by
  // method as well as by code (call RecordResult too).
  void RecordRefusal(absl::string_view method, const absl::Status& status);
  void AddBytesIn(uint64_t n) { bytes_in_ += n; }
  void AddBytesOut(uint64_t n) { bytes_out_ += n; }
  uint64_t bytes_in() const { return bytes_in_.load(); }
  uint64_t bytes_out() const { return bytes_out_.load(); }
  void Fill(v1::RpcCounters* out) const;

 private:
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, uint64_t, std::less<>> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> errors_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> unauthenticated_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> permission_denied_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_RPC_COUNTERS_H_
