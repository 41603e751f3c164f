// GlooWorkerGroup: the CPU WorkerGroup, on Gloo's TCP transport.
//
// Ranks rendezvous through a RendezvousStore (keys under
// "zs/comm/<group>/"), then hold one TCP connection per peer (a full mesh,
// listening on GroupOptions::hostname / interface, port chosen by the
// kernel). The collectives are rings written over Gloo's unbound buffers, so
// that every wait knows which peer it waits for and is bounded by the
// remaining time of the call:
//   all-gather      N-1 steps, each rank forwards one part to rank+1;
//   reduce-scatter  N-1 steps, each forwards a running FP32 sum of one part
//                   (1 MiB segments, so adding overlaps receiving); every
//                   element is sent N-1 times in total, as in all-gather;
//   small all-reduce = all-gather of the vectors, then a reduction in rank
//                   order on every rank (bitwise-equal results everywhere);
//   broadcast       root sends length and bytes to each rank;
//   barrier         all-gather of one byte per rank.
// Buffers are host memory. See collectives.h for the contracts.
//
//   ASSIGN_OR_RETURN(auto group, GlooWorkerGroup::Create(rank, n, &kv, opts));
//   RETURN_IF_ERROR(group->ReduceScatter(grad_unit, grad_part, 1.0f));
#ifndef ZEROSHARD_WORKER_COMM_GLOO_COLLECTIVES_H_
#define ZEROSHARD_WORKER_COMM_GLOO_COLLECTIVES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/collectives.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace zeroshard {

class GlooWorkerGroup : public WorkerGroup {
 public:
  // Rendezvous + full-mesh connect, bounded by options.timeout.
  static absl::StatusOr<std::unique_ptr<GlooWorkerGroup>> Create(
      int rank, int size, RendezvousStore* store, const GroupOptions& options);
  ~GlooWorkerGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend() const override { return "gloo"; }

  absl::Status AllGather(absl::Span<const uint8_t> local,
                         absl::Span<uint8_t> out) override;
  absl::Status AllGatherInPlace(absl::Span<uint8_t> out) override;
  absl::Status ReduceScatter(absl::Span<const float> in, absl::Span<float> out,
                             float scale) override;
  absl::Status Broadcast(std::string* bytes, int root) override;
  absl::Status Barrier() override;

  // The ring reduce-scatter's segment size in floats (default 256 Ki = 1 MiB);
  // tests lower it to exercise many segments on small inputs. Must be >= 1.
  void set_segment_floats(size_t n) { segment_floats_ = n < 1 ? 1 : n; }

 protected:
  absl::Status AllReduceHost(ReduceType type, void* values, size_t count,
                             ReduceOp op) override;

 private:
  GlooWorkerGroup(int rank, int size, const GroupOptions& options);

  // Runs one collective: refuses when broken, catches Gloo's exceptions, and
  // breaks the group (closing its connections) on any communication error.
  absl::Status Run(const char* op, const std::function<absl::Status(absl::Time)>& body);
  // Bounded waits on one pending op against `peer`.
  absl::Status WaitRecv(gloo::transport::UnboundBuffer& buf, int peer,
                        absl::Time deadline, const char* op);
  absl::Status WaitSend(gloo::transport::UnboundBuffer& buf, int peer,
                        absl::Time deadline, const char* op);
  // Posts a send to / receive from `peer` (Gloo throws if the pair is gone).
  absl::Status Post(bool send, gloo::transport::UnboundBuffer& buf, int peer,
                    uint64_t slot, const char* op);
  absl::Status RingAllGather(uint8_t* out, size_t part, absl::Time deadline,
                             const char* op);
  std::unique_ptr<gloo::transport::UnboundBuffer> Buffer(const void* ptr,
                                                          size_t bytes);
  int left() const { return (rank_ + size_ - 1) % size_; }
  int right() const { return (rank_ + 1) % size_; }

  // Constant after construction.
  const int rank_;
  const int size_;
  const std::string group_;
  const absl::Duration timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;

  absl::Status broken_;  // first communication error; OK while healthy
  size_t segment_floats_ = 256 * 1024;
  // Reduce-scatter scratch, kept between calls: two running sums + receive.
  std::vector<float> sum_[2];
  std::vector<float> recv_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMM_GLOO_COLLECTIVES_H_
