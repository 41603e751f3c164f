#include "data/dataset.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/status_macros.h"
#include "data/token_file.h"

namespace zeroshard {
namespace {

struct Keep {
  std::vector<Corpus> corpora;
  std::vector<TokenFile> files;
};

absl::StatusOr<std::vector<TokenSegment>> OpenAll(const std::vector<std::string>& patterns,
                                                  const std::string& key, DataFormat format,
                                                  int vocab, Keep* keep) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataPaths(patterns, key));
  std::vector<TokenSegment> out;
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(TokenFile t, TokenFile::Open(f, format, vocab));
    TokenSegment s;
    s.u16 = t.tokens().data();
    s.size = t.tokens().size();
    s.source = f;
    out.push_back(std::move(s));
    keep->files.push_back(std::move(t));
  }
  return out;
}

// Moves the last `n` tokens of `train` into a new list (validation).
std::vector<TokenSegment> TakeTail(std::vector<TokenSegment>* train, uint64_t n) {
  std::vector<TokenSegment> tail;
  while (n > 0 && !train->empty()) {
    TokenSegment& last = train->back();
    const uint64_t take = std::min(n, last.size);
    TokenSegment t = last;
    t.u16 = last.u16 + (last.size - take);
    t.size = take;
    tail.insert(tail.begin(), t);
    last.size -= take;
    n -= take;
    if (last.size == 0) train->pop_back();
  }
  return tail;
}

uint64_t Sum(const std::vector<TokenSegment>& s) {
  uint64_t n = 0;
  for (const TokenSegment& x : s) n += x.size;
  return n;
}

}  // namespace

Dataset Dataset::FromCorpus(const Corpus& corpus) {
  Dataset d;
  auto keep = std::make_shared<Keep>();
  keep->corpora.push_back(corpus);
  for (DataSplit which : {DataSplit::kTrain, DataSplit::kValidation}) {
    absl::Span<const uint8_t> s = corpus.split(which);
    if (s.empty()) continue;
    TokenSegment seg;
    seg.bytes = s.data();
    seg.size = s.size();
    seg.source = corpus.sources().size() == 1 ? corpus.sources()[0] : "text";
    d.splits_[static_cast<int>(which)].push_back(std::move(seg));
  }
  d.keep_ = std::move(keep);
  return d;
}

absl::StatusOr<Dataset> Dataset::Load(const DataConfig& data, int vocab) {
  if (data.format == DataFormat::kBytes) {
    if (data.validation_paths.empty()) {
      std::vector<std::string> paths;
      if (!data.paths.empty()) {
        ASSIGN_OR_RETURN(paths, ExpandDataPaths(data.paths, data.paths_key));
      }
      DataConfig d = data;
      d.paths = paths;
      ASSIGN_OR_RETURN(Corpus c, Corpus::Load(d));
      return FromCorpus(c);
    }
    DataConfig train_cfg = data;
    train_cfg.validation_fraction = 0;
    if (!data.paths.empty()) {
      ASSIGN_OR_RETURN(train_cfg.paths, ExpandDataPaths(data.paths, data.paths_key));
    }
    ASSIGN_OR_RETURN(Corpus train, Corpus::Load(train_cfg));
    ASSIGN_OR_RETURN(std::vector<std::string> vpaths,
                     ExpandDataPaths(data.validation_paths, "zeroshard.data.validation"));
    ASSIGN_OR_RETURN(Corpus val, Corpus::FromFiles(vpaths, 0));
    Dataset d = FromCorpus(train);
    Dataset v = FromCorpus(val);
    d.splits_[1] = v.splits_[0];
    auto keep = std::make_shared<Keep>();
    keep->corpora = {train, val};
    d.keep_ = std::move(keep);
    return d;
  }
  auto keep = std::make_shared<Keep>();
  Dataset d;
  d.format_ = data.format;
  ASSIGN_OR_RETURN(d.splits_[0],
                   OpenAll(data.paths, "zeroshard.data.train", data.format, vocab, keep.get()));
  if (!data.validation_paths.empty()) {
    ASSIGN_OR_RETURN(d.splits_[1], OpenAll(data.validation_paths, "zeroshard.data.validation",
                                           data.format, vocab, keep.get()));
  } else {
    const uint64_t n = Sum(d.splits_[0]);
    const auto held = static_cast<uint64_t>(std::floor(n * data.validation_fraction));
    d.splits_[1] = TakeTail(&d.splits_[0], held);
  }
  d.keep_ = std::move(keep);
  return d;
}

uint64_t Dataset::tokens(DataSplit which) const { return Sum(split(which)); }

std::string Dataset::Describe() const {
  auto files = [](const std::vector<TokenSegment>& s) {
    return absl::StrCat(s.size(), s.size() == 1 ? " file" : " files");
  };
  return absl::StrCat("data: format ", DataFormatName(format_), ", training ",
                      tokens(DataSplit::kTrain), " tokens (", files(split(DataSplit::kTrain)),
                      "), validation ", tokens(DataSplit::kValidation), " tokens (",
                      files(split(DataSplit::kValidation)), ")");
}

}  // namespace zeroshard
