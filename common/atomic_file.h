// Writing a file so that readers see either the old contents or the whole
// new contents, never a part: the bytes go to a temporary file next to it,
// which is then renamed over `path` (atomic on one file system).
//
//   RETURN_IF_ERROR(WriteFileAtomically(dir + "/weights.json", json_text));
#ifndef ZEROSHARD_COMMON_ATOMIC_FILE_H_
#define ZEROSHARD_COMMON_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// PERMISSION_DENIED when the temporary file cannot be created, DATA_LOSS when
// writing or renaming fails; the temporary file is removed on failure and
// `path` is left as it was.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ATOMIC_FILE_H_
