#include "worker/data/batch_sampler.h"

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {


uint64_t SampleHash(uint64_t seed, uint64_t step, uint64_t g) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ g);
}

}  // namespace

BatchSampler::BatchSampler(Corpus corpus, absl::Span<const uint8_t> text, int context,
                           uint64_t seed)
    : corpus_(std::move(corpus)),
      text_(text),
      context_(context),
      seed_(seed),
      num_offsets_(text.size() - static_cast<uint64_t>(context)) {}

absl::StatusOr<BatchSampler> BatchSampler::Create(const Corpus& corpus, DataSplit split,
                                                  int context, uint64_t seed) {
  if (context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: context ", context, " must be >= 1"));
  }
  absl::Span<const uint8_t> text = corpus.split(split);
  if (text.size() < static_cast<uint64_t>(context) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: the ", split == DataSplit::kTrain ? "training" : "validation", " split has ",
        text.size(), " bytes, fewer than context + 1 = ", static_cast<uint64_t>(context) + 1,
        split == DataSplit::kValidation ? " (raise zeroshard.data.validation_fraction)" : ""));
  }
  return BatchSampler(corpus, text, context, seed);
}

uint64_t BatchSampler::GlobalSampleIndex(int rank, int world_size, int micro_step,
                                         int micro_batch_size, int i) {
  return (static_cast<uint64_t>(micro_step) * static_cast<uint64_t>(world_size) +
          static_cast<uint64_t>(rank)) *
             static_cast<uint64_t>(micro_batch_size) +
         static_cast<uint64_t>(i);
}

uint64_t BatchSampler::Offset(uint64_t step, uint64_t g) const {
  const unsigned __int128 wide =
      static_cast<unsigned __int128>(SampleHash(seed_, step, g)) * num_offsets_;
  return static_cast<uint64_t>(wide >> 64);
}

absl::Status BatchSampler::FillSample(uint64_t step, uint64_t g, absl::Span<int32_t> inputs,
                                      absl::Span<int32_t> targets) const {
  const size_t t_len = static_cast<size_t>(context_);
  if (inputs.size() != t_len || targets.size() != t_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: sample spans hold ", inputs.size(), " and ", targets.size(),
        " tokens; expected context = ", context_));
  }
  const uint8_t* w = text_.data() + Offset(step, g);
  for (size_t t = 0; t < t_len; ++t) {
    inputs[t] = w[t];
    targets[t] = w[t + 1];
  }
  return absl::OkStatus();
}

absl::Status BatchSampler::FillMicroBatch(uint64_t step, int rank, int world_size,
                                          int micro_step, int micro_batch_size,
                                          absl::Span<int32_t> inputs,
                                          absl::Span<int32_t> targets) const {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: rank ", rank, " outside [0, world_size = ", world_size, ")"));
  }
  if (micro_step < 0 || micro_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: micro_step ", micro_step,
                                                   " must be >= 0 and micro_batch_size ",
                                                   micro_batch_size, " >= 1"));
  }
  const size_t t_len = static_cast<size_t>(context_);
  const size_t want = static_cast<size_t>(micro_batch_size) * t_len;
  if (inputs.size() != want || targets.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: micro-batch spans hold ", inputs.size(), " and ", targets.size(),
        " tokens; expected micro_batch_size * context = ", want));
  }
  for (int i = 0; i < micro_batch_size; ++i) {
    const uint64_t g = GlobalSampleIndex(rank, world_size, micro_step, micro_batch_size, i);
    RETURN_IF_ERROR(FillSample(step, g, inputs.subspan(i * t_len, t_len),
                               targets.subspan(i * t_len, t_len)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenBatch> BatchSampler::MicroBatch(uint64_t step, int rank, int world_size,
                                                    int micro_step, int micro_batch_size) const {
  TokenBatch b;
  b.batch = micro_batch_size;
  b.context = context_;
  if (micro_batch_size < 1 || micro_batch_size > (1 << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: micro_batch_size ", micro_batch_size, " outside [1, 2^24]"));
  }
  b.inputs.resize(static_cast<size_t>(micro_batch_size) * context_);
  b.targets.resize(b.inputs.size());
  RETURN_IF_ERROR(FillMicroBatch(step, rank, world_size, micro_step, micro_batch_size,
                                 absl::MakeSpan(b.inputs), absl::MakeSpan(b.targets)));
  return b;
}

}  // namespace zeroshard
