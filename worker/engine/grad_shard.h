// GradShard: the gradient side of one worker's step (docs/DESIGN.md, "One
// training step", items 3 and 4): the full-unit FP32 gradient buffers the
// model writes, their reduce-scatter into this worker's 1/N partition on the
// comm queue (accumulated over micro-batches), each finished part's sum of
// squares for the global norm, and the part's push to the servers that own
// it, in FP32 or rounded to BF16.
//
// StepEngine drives it from the compute thread:
//
//   RETURN_IF_ERROR(grads.BeginStep());
//   ASSIGN_OR_RETURN(auto g, grads.Buffer(u, accumulate));
//   model->BlockBackward(l, p, grads.Span(u, g));
//   grads.QueueReduceScatter(u, std::move(g), accumulate, push);   // ZeRO-2/3
//   ...
//   grads.QueueResident(push);                                     // ZeRO-1
//   RETURN_IF_ERROR(queue.Drain());
//   ASSIGN_OR_RETURN(double sumsq, grads.SumOfSquares());
//
// Where the model computes in its own memory (`mem` non-null) the full-unit
// buffers live there and only this worker's part comes back to page-locked
// host memory; otherwise everything is host memory. With one worker under
// ZeRO-2/3 on the host the reduce-scatter is the identity and the model
// accumulates straight into the partition (no full-unit buffer exists).
#ifndef ZEROSHARD_WORKER_ENGINE_GRAD_SHARD_H_
#define ZEROSHARD_WORKER_ENGINE_GRAD_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/push_session.h"
#include "common/layout.h"
#include "common/page_aligned.h"
#include "model/model_memory.h"
#include "comm/collectives.h"
#include "worker/engine/comm_queue.h"

namespace zeroshard {

// What the gradient side needs of the training configuration.
struct GradShardOptions {
  int stage = 3;           // zero_optimization.stage (1: full grads resident)
  bool bf16_wire = false;  // communication_data_type bf16: push rounded
};

class GradShard {
 public:
  // A full unit's FP32 gradient: host memory, or model memory. The deleter
  // returns it and counts it out of the live bytes.
  struct UnitGrad {
    float* data = nullptr;
    size_t size = 0;
    std::vector<float> host;
  };
  using UnitGradPtr = std::shared_ptr<UnitGrad>;

  // The pointers must outlive the GradShard; `mem` may be null (host).
  static absl::StatusOr<std::unique_ptr<GradShard>> Create(
      const FlatLayout* layout, int rank, WorkerGroup* group, CommQueue* queue,
      model::ModelMemory* mem, const GradShardOptions& options);
  ~GradShard();
  GradShard(const GradShard&) = delete;
  GradShard& operator=(const GradShard&) = delete;

  // Zeroes the partition and the resident buffers; no unit finished yet.
  absl::Status BeginStep();
  // A zeroed buffer for unit u's full gradient (ZeRO-2/3), the resident one
  // (ZeRO-1), or null where the gradient goes straight into the partition
  // (one worker on the host, first micro-batch).
  absl::StatusOr<UnitGradPtr> Buffer(int unit, bool accumulate);
  // Where the model writes unit u's gradient: `buffer`, or the partition.
  absl::Span<float> Span(int unit, const UnitGradPtr& buffer);
  // Queues the reduce-scatter of unit u's `grad` into the partition
  // (adding to it when `accumulate`) and, when `push` is set, the push of
  // the finished part. Errors surface at the queue's Drain.
  void QueueReduceScatter(int unit, UnitGradPtr grad, bool accumulate,
                          PushSession* push);
  // ZeRO-1, last micro-batch: queues every resident unit's reduce-scatter
  // and push.
  void QueueResident(PushSession* push);
  // After the queue drained: the partition's sum of squares (units in unit
  // order), or INTERNAL if some unit's part was never finished.
  absl::StatusOr<double> SumOfSquares() const;
  // Test hook: makes the partition's first element +inf, as an FP16
  // overflow would.
  void InjectOverflow();

  absl::Span<const float> partition() const { return shard_; }
  size_t size() const { return shard_.size(); }
  // Bytes: the partition, its BF16 wire copy, the peak of full-unit buffers.
  uint64_t shard_bytes() const { return shard_.size() * sizeof(float); }
  uint64_t push_buffer_bytes() const { return push_bf16_.size() * sizeof(uint16_t); }
  uint64_t unit_grads_peak() const { return peak_bytes_; }

 private:
  GradShard(const FlatLayout* layout, int rank, WorkerGroup* group,
            CommQueue* queue, model::ModelMemory* mem,
            const GradShardOptions& options);

  absl::StatusOr<UnitGradPtr> NewUnitGrad(size_t n);
  // Model memory: the reduce-scatter of `grad` into `out` on the host.
  // Comm thread.
  absl::Status ReduceScatterFromModel(const UnitGrad& grad,
                                      absl::Span<float> out);
  // Unit u's part is final: records its sum of squares and adds it to
  // `push`. Comm thread.
  absl::Status FinishPart(PushSession* push, int unit, FlatRange part);

  const FlatLayout* layout_;
  const int rank_;
  const int world_;
  WorkerGroup* group_;
  CommQueue* queue_;
  model::ModelMemory* mem_;
  const GradShardOptions options_;
  bool direct_ = false;
  PageAlignedVector<float> shard_;
  std::vector<size_t> offset_;       // element offset of unit u's part
  std::vector<double> unit_sumsq_;   // comm thread; read after the drain
  size_t units_finished_ = 0;
  PageAlignedVector<float> scratch_;  // reduce-scatter output (accumulating)
  std::vector<uint16_t> push_bf16_;  // BF16 wire form, indexed like shard_
  std::vector<UnitGradPtr> resident_;  // ZeRO-1
  // Model memory: the reduce-scatter's output, and page-locked host buffers.
  float* rs_model_ = nullptr;
  size_t rs_model_size_ = 0;
  std::vector<void*> pinned_;
  uint64_t live_bytes_ = 0;  // atomic access: freed on the comm thread
  uint64_t peak_bytes_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_GRAD_SHARD_H_
