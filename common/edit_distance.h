// Levenshtein distance (insertions, deletions, substitutions), for the
// "did you mean" of a misspelled config key, flag or subcommand.
#ifndef ZEROSHARD_COMMON_EDIT_DISTANCE_H_
#define ZEROSHARD_COMMON_EDIT_DISTANCE_H_

#include <algorithm>
#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"

namespace zeroshard {

inline size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_EDIT_DISTANCE_H_
