// BatchSampler: which token windows each worker trains on, as a pure function
// of (seed, step, global sample index), so a restarted or resized run sees
// the same data.
//
// Global sample indices: at optimizer step s, worker rank r of N, micro-step
// m (0 <= m < gradient_accumulation_steps), micro-batch size b, row i < b
// trains on global sample
//     g = (m * N + r) * b + i.
// A step therefore covers exactly g in [0, train_batch_size), however the
// batch is factored: 2 workers x 2 micro-batches of b, 1 worker x 4 of b and
// 1 worker x 1 of 4b see the same samples.
//
// Sample g of step s is the window of context + 1 tokens of the split
// starting at offset = floor(H(seed, s, g) * num_offsets / 2^64), where H is
// a counter-based 64-bit hash (SplitMix64's finalizer chained over seed,
// step, g) and num_offsets = the sum over the split's segments (files) of
// max(0, segment size - context); offsets number the windows of segment 0,
// then of segment 1, ..., so no window crosses a file boundary (for the byte
// corpus, one segment: num_offsets = split size - context).
// inputs[t] = token[offset + t], targets[t] = token[offset + t + 1],
// t < context; bytes are tokens in [0, 256).
//
//   ASSIGN_OR_RETURN(BatchSampler sampler,
//                    BatchSampler::Create(corpus, DataSplit::kTrain, T, seed));
//   std::vector<int32_t> in(b * T), tg(b * T);
//   RETURN_IF_ERROR(sampler.FillMicroBatch(step, rank, N, micro_step, b, in, tg));
//
// Immutable after Create; safe to share between threads.
#ifndef ZEROSHARD_WORKER_DATA_BATCH_SAMPLER_H_
#define ZEROSHARD_WORKER_DATA_BATCH_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/corpus.h"
#include "data/dataset.h"

namespace zeroshard {

// Row-major [b, T] token ids of one micro-batch.
struct TokenBatch {
  int batch = 0;
  int context = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

class BatchSampler {
 public:
  // INVALID_ARGUMENT when context < 1 or no segment of the split has
  // context + 1 tokens (the message names the split and the sizes).
  // The sampler keeps a copy of `data` (which shares its tokens).
  static absl::StatusOr<BatchSampler> Create(const Dataset& data, DataSplit split, int context,
                                             uint64_t seed);
  static absl::StatusOr<BatchSampler> Create(const Corpus& corpus, DataSplit split, int context,
                                             uint64_t seed) {
    return Create(Dataset::FromCorpus(corpus), split, context, seed);
  }

  // g = (micro_step * world_size + rank) * micro_batch_size + i. No checks.
  static uint64_t GlobalSampleIndex(int rank, int world_size, int micro_step,
                                    int micro_batch_size, int i);

  // The start of sample g's window at `step`, in [0, num_offsets()).
  uint64_t Offset(uint64_t step, uint64_t g) const;

  // Writes sample g of `step`: inputs and targets must each hold context()
  // elements (INVALID_ARGUMENT otherwise).
  absl::Status FillSample(uint64_t step, uint64_t g, absl::Span<int32_t> inputs,
                          absl::Span<int32_t> targets) const;

  // Writes rows i = 0..b-1 (samples GlobalSampleIndex(rank, world_size,
  // micro_step, b, i)) into [b, T] row-major spans of b * context() elements.
  // INVALID_ARGUMENT for rank outside [0, world_size), world_size < 1,
  // micro_step < 0, b < 1, or wrong span sizes.
  absl::Status FillMicroBatch(uint64_t step, int rank, int world_size, int micro_step,
                              int micro_batch_size, absl::Span<int32_t> inputs,
                              absl::Span<int32_t> targets) const;

  // The same, allocating.
  absl::StatusOr<TokenBatch> MicroBatch(uint64_t step, int rank, int world_size, int micro_step,
                                        int micro_batch_size) const;

  int context() const { return context_; }
  uint64_t seed() const { return seed_; }
  uint64_t num_offsets() const { return num_offsets_; }

 private:
  BatchSampler(Dataset data, std::vector<TokenSegment> segments, int context, uint64_t seed);

  Dataset data_;  // keeps the segments' tokens alive
  std::vector<TokenSegment> segments_;  // those with context + 1 tokens
  std::vector<uint64_t> first_offset_;  // of each segment; ascending
  int context_;
  uint64_t seed_;
  uint64_t num_offsets_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_DATA_BATCH_SAMPLER_H_
