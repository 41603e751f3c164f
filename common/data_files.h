// The data files a configuration names (zeroshard.data.paths and
// zeroshard.data.validation: paths or glob patterns), expanded and checked,
// so that the launcher refuses a missing or unreadable file before it starts
// any process, and the workers read exactly the files it checked.
//
//   ASSIGN_OR_RETURN(std::vector<std::string> files,
//                    ExpandDataPaths(cfg.data.paths, "zeroshard.data.paths"));
//   RETURN_IF_ERROR(CheckDataFiles(cfg.data));   // every file readable
#ifndef ZEROSHARD_COMMON_DATA_FILES_H_
#define ZEROSHARD_COMMON_DATA_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace zeroshard {

// Each pattern's matches in sorted order (a plain path as it is); NOT_FOUND
// for a pattern without a match, naming it and `key` (the config key).
absl::StatusOr<std::vector<std::string>> ExpandDataPaths(
    const std::vector<std::string>& patterns, const std::string& key);

// Every training and validation file exists and can be opened for reading:
// NOT_FOUND or PERMISSION_DENIED naming the config key and the file.
absl::Status CheckDataFiles(const DataConfig& data);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_DATA_FILES_H_
