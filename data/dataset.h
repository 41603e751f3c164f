// Dataset: the training and validation tokens, as the config names them
// (zeroshard.data), whatever the file format.
//
// A split is a list of segments, each a contiguous run of tokens from one
// source: the concatenated text of the byte corpus (one segment, bytes as
// tokens 0..255), or one memory-mapped token file (uint16 tokens). Samples
// never cross a segment boundary (one file's end is not followed by the
// next file's start, as in llm.c's loader).
//
//   ASSIGN_OR_RETURN(Dataset data, Dataset::Load(cfg.cluster.data,
//                                                cfg.cluster.model.vocab));
//   ASSIGN_OR_RETURN(BatchSampler train,
//                    BatchSampler::Create(data, DataSplit::kTrain, T, seed));
//   ZS_LOG(INFO) << data.Describe();
//
// Contracts:
// - format bytes: Corpus::Load's text (paths, or the built-in corpus) with
//   its validation_fraction split; with validation files, those files'
//   text is the validation split and the training text is not split.
// - llmc / uint16 / auto: each entry of `paths` and `validation_paths` is a
//   path or a glob pattern (glob(3), sorted); a pattern matching nothing is
//   NOT_FOUND naming it. Every file is opened with TokenFile::Open (header,
//   size and every token < vocab checked; errors name the file). Without
//   validation files the last floor(n * validation_fraction) training tokens
//   (n = all training tokens, the tail of the last files) are held out.
// - Immutable; copies share the mappings, which live while any copy (or a
//   BatchSampler made from one) does.
#ifndef ZEROSHARD_WORKER_DATA_DATASET_H_
#define ZEROSHARD_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "data/corpus.h"

namespace zeroshard {

// A run of tokens: exactly one of `bytes` and `u16` is set.
struct TokenSegment {
  const uint8_t* bytes = nullptr;
  const uint16_t* u16 = nullptr;
  uint64_t size = 0;
  std::string source;  // file name, or "text" for the byte corpus
  int32_t at(uint64_t i) const { return bytes != nullptr ? bytes[i] : u16[i]; }
};

class Dataset {
 public:
  static absl::StatusOr<Dataset> Load(const DataConfig& data, int vocab);
  // The byte corpus as a dataset (one segment per split).
  static Dataset FromCorpus(const Corpus& corpus);

  const std::vector<TokenSegment>& split(DataSplit which) const {
    return splits_[static_cast<int>(which)];
  }
  uint64_t tokens(DataSplit which) const;
  DataFormat format() const { return format_; }
  // One line: format, file and token counts of both splits.
  std::string Describe() const;

 private:
  Dataset() = default;

  DataFormat format_ = DataFormat::kBytes;
  std::vector<TokenSegment> splits_[2];
  std::shared_ptr<const void> keep_;  // the Corpus or the TokenFiles
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_DATA_DATASET_H_
