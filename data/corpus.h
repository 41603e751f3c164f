// Corpus: the training text as bytes (byte-level tokens, vocabulary 256),
// split into a training part and a validation part (the last fraction).
//
// Nothing is downloaded. By default the corpus is the concatenation of the
// license texts Debian installs in /usr/share/common-licenses (package
// base-files): every regular file there (symbolic links such as GPL -> GPL-3
// are skipped so no text appears twice), in byte-wise sorted name order, each
// followed by one '\n'. Configured paths (zeroshard.data.paths) replace it
// and are concatenated in the given order, also each followed by '\n'.
//
//   ASSIGN_OR_RETURN(Corpus corpus, Corpus::Load(cfg.cluster.data));
//   absl::Span<const uint8_t> train = corpus.split(DataSplit::kTrain);
//
// Contracts: the split point is size - floor(size * validation_fraction);
// the validation part is empty when the fraction is 0. Immutable after
// construction; safe to share between threads. Copies share the bytes, and a
// span from split() stays valid while any copy of the Corpus lives.
#ifndef ZEROSHARD_WORKER_DATA_CORPUS_H_
#define ZEROSHARD_WORKER_DATA_CORPUS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/config.h"

namespace zeroshard {

inline constexpr char kBuiltInCorpusDir[] = "/usr/share/common-licenses";

enum class DataSplit { kTrain = 0, kValidation = 1 };

class Corpus {
 public:
  // From `data.paths`, or the built-in corpus when it is empty.
  static absl::StatusOr<Corpus> Load(const DataConfig& data);

  // The files, concatenated in order. NOT_FOUND naming the first file that
  // cannot be read; INVALID_ARGUMENT when the result is empty or the fraction
  // is outside [0, 1).
  static absl::StatusOr<Corpus> FromFiles(const std::vector<std::string>& paths,
                                          double validation_fraction);

  // Every regular file in `dir`, in sorted name order. FAILED_PRECONDITION
  // when there are none (e.g. base-files not installed).
  static absl::StatusOr<Corpus> BuiltIn(double validation_fraction,
                                        const std::string& dir = kBuiltInCorpusDir);

  // In-memory text (tests).
  static absl::StatusOr<Corpus> FromBytes(std::string bytes, double validation_fraction);

  absl::Span<const uint8_t> split(DataSplit which) const;
  uint64_t size() const { return bytes_->size(); }
  uint64_t train_size() const { return split_point_; }
  // Files the bytes came from, in order (empty for FromBytes).
  const std::vector<std::string>& sources() const { return sources_; }
  // 64-bit FNV-1a of all bytes: lets workers check they read the same text.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Corpus(std::string bytes, uint64_t split_point, std::vector<std::string> sources);

  std::shared_ptr<const std::string> bytes_;
  uint64_t split_point_ = 0;
  std::vector<std::string> sources_;
  uint64_t fingerprint_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_DATA_CORPUS_H_
