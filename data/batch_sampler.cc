#include "data/batch_sampler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {


uint64_t SampleHash(uint64_t seed, uint64_t step, uint64_t g) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ g);
}

}  // namespace

BatchSampler::BatchSampler(Dataset data, std::vector<TokenSegment> segments, int context,
                           uint64_t seed)
    : data_(std::move(data)), segments_(std::move(segments)), context_(context), seed_(seed) {
  uint64_t n = 0;
  for (const TokenSegment& s : segments_) {
    first_offset_.push_back(n);
    n += s.size - static_cast<uint64_t>(context);
  }
  num_offsets_ = n;
}

absl::StatusOr<BatchSampler> BatchSampler::Create(const Dataset& data, DataSplit split,
                                                  int context, uint64_t seed) {
  if (context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: context ", context, " must be >= 1"));
  }
  const uint64_t need = static_cast<uint64_t>(context) + 1;
  std::vector<TokenSegment> usable;
  uint64_t largest = 0;
  for (const TokenSegment& s : data.split(split)) {
    largest = std::max(largest, s.size);
    if (s.size >= need) usable.push_back(s);
  }
  if (usable.empty()) {
    const bool bytes = data.format() == DataFormat::kBytes;
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: the ", split == DataSplit::kTrain ? "training" : "validation", " split has ",
        data.split(split).size() > 1 ? "no file with " : "", largest,
        bytes ? " bytes" : " tokens", data.split(split).size() > 1 ? " or more" : "",
        ", fewer than context + 1 = ", need,
        split == DataSplit::kValidation
            ? " (raise zeroshard.data.validation_fraction or give zeroshard.data.validation files)"
            : ""));
  }
  return BatchSampler(data, std::move(usable), context, seed);
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
  const uint64_t offset = Offset(step, g);
  // The last segment whose first offset is <= offset.
  const size_t k = static_cast<size_t>(
      std::upper_bound(first_offset_.begin(), first_offset_.end(), offset) -
      first_offset_.begin() - 1);
  const TokenSegment& s = segments_[k];
  const uint64_t at = offset - first_offset_[k];
  if (s.bytes != nullptr) {
    const uint8_t* w = s.bytes + at;
    for (size_t t = 0; t < t_len; ++t) {
      inputs[t] = w[t];
      targets[t] = w[t + 1];
    }
  } else {
    const uint16_t* w = s.u16 + at;
    for (size_t t = 0; t < t_len; ++t) {
      inputs[t] = w[t];
      targets[t] = w[t + 1];
    }
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
