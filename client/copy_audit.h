// With replicas (docs/DESIGN.md, "Replicas"): the two copies of every slot
// compared, at a step's version, while the step computes. Between rank 0's
// application of one step and of the next nothing changes the servers'
// state, so a comparison started when a step begins (every slot at its
// version) and finished before rank 0 applies it sees one version on both
// copies, and costs the step no time but the servers' hashing. A slot whose
// copies differ ends the run with DATA_LOSS naming the slot's flat range,
// its two servers, their versions and digests
// (ShardCluster::CheckCopiesAgree).
//
//   CopyAudit audit(cluster, /*every=*/10);
//   audit.Start(step);                      // as the step begins (rank 0)
//   ...                                     // the step's compute and push
//   RETURN_IF_ERROR(audit.Finish());        // before rank 0 applies it
//
// Without replicas, or with every = 0, Start does nothing. Start and Finish
// are called from one thread; the comparison runs on a thread of its own.
#ifndef ZEROSHARD_CLIENT_COPY_AUDIT_H_
#define ZEROSHARD_CLIENT_COPY_AUDIT_H_

#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "client/shard_cluster.h"

namespace zeroshard {

class CopyAudit {
 public:
  // `cluster` outlives the audit.
  CopyAudit(const ShardCluster* cluster, uint64_t every)
      : cluster_(cluster), every_(every) {}
  // Waits for a comparison in flight.
  ~CopyAudit();
  CopyAudit(const CopyAudit&) = delete;
  CopyAudit& operator=(const CopyAudit&) = delete;

  // Whether the copies are compared at version `step`: replicas, every > 0,
  // a step after the first that is a multiple of it.
  bool Due(uint64_t step) const;
  // Before step `step` runs: starts comparing the copies when due (after
  // waiting for an earlier comparison still in flight, whose verdict
  // Finish then reports).
  void Start(uint64_t step);
  // Before rank 0 applies the step: the verdict of the comparison started
  // (OK when none was), after waiting for it.
  absl::Status Finish();
  // Comparisons finished so far.
  uint64_t compared() const { return compared_; }

 private:
  // Waits for the comparison in flight, if any, and keeps its verdict.
  void Join();

  const ShardCluster* const cluster_;
  const uint64_t every_;
  std::thread running_;
  absl::Status verdict_;  // written by running_, read after it is joined
  absl::Status pending_;  // the first failure no Finish has reported yet
  uint64_t compared_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_COPY_AUDIT_H_
