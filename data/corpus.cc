#include "data/corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("corpus: cannot read file ", path));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("corpus: error reading ", path));
  return out.str();
}

absl::Status CheckFraction(double f) {
  if (!(f >= 0 && f < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("corpus: validation_fraction ", f, " outside [0, 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

Corpus::Corpus(std::string bytes, uint64_t split_point, std::vector<std::string> sources)
    : bytes_(std::make_shared<const std::string>(std::move(bytes))), split_point_(split_point), sources_(std::move(sources)) {
  fingerprint_ = Fnv1a64(*bytes_);
}

absl::StatusOr<Corpus> Corpus::FromBytes(std::string bytes, double validation_fraction) {
  RETURN_IF_ERROR(CheckFraction(validation_fraction));
  if (bytes.empty()) return absl::InvalidArgumentError("corpus: no text");
  const uint64_t n = bytes.size();
  const uint64_t validation = static_cast<uint64_t>(std::floor(n * validation_fraction));
  return Corpus(std::move(bytes), n - validation, {});
}

absl::StatusOr<Corpus> Corpus::FromFiles(const std::vector<std::string>& paths,
                                         double validation_fraction) {
  if (paths.empty()) return absl::InvalidArgumentError("corpus: no files given");
  std::string all;
  for (const std::string& p : paths) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(p));
    all += text;
    all += '\n';
  }
  if (all.size() == paths.size()) {
    return absl::InvalidArgumentError("corpus: the configured files are all empty");
  }
  ASSIGN_OR_RETURN(Corpus c, FromBytes(std::move(all), validation_fraction));
  c.sources_ = paths;
  return c;
}

absl::StatusOr<Corpus> Corpus::BuiltIn(double validation_fraction, const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    // symlink_status: a link (GPL -> GPL-3) would repeat a text.
    if (std::filesystem::is_regular_file(it->symlink_status())) {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "corpus: no license texts found in ", dir,
        " (Debian package base-files); set zeroshard.data.paths to your own text files"));
  }
  return FromFiles(files, validation_fraction);
}

absl::StatusOr<Corpus> Corpus::Load(const DataConfig& data) {
  if (data.paths.empty()) return BuiltIn(data.validation_fraction);
  return FromFiles(data.paths, data.validation_fraction);
}

absl::Span<const uint8_t> Corpus::split(DataSplit which) const {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes_->data());
  if (which == DataSplit::kTrain) return absl::Span<const uint8_t>(p, split_point_);
  return absl::Span<const uint8_t>(p + split_point_, bytes_->size() - split_point_);
}

}  // namespace zeroshard
