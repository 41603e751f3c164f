// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
//
// Debian's Abseil (20220623) ships neither, so they live here, once.
//
//   absl::StatusOr<int> Parse(absl::string_view s);
//   absl::Status Use() {
//     ASSIGN_OR_RETURN(int n, Parse("42"));
//     RETURN_IF_ERROR(Check(n));
//     return absl::OkStatus();
//   }
#ifndef ZEROSHARD_COMMON_STATUS_MACROS_H_
#define ZEROSHARD_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ZS_STATUS_CONCAT_INNER_(a, b) a##b
#define ZS_STATUS_CONCAT_(a, b) ZS_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status zs_status_ = (expr);              \
    if (!zs_status_.ok()) return zs_status_;         \
  } while (0)

#define ZS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ZS_ASSIGN_OR_RETURN_IMPL_(ZS_STATUS_CONCAT_(zs_statusor_, __LINE__), lhs, rexpr)

#endif  // ZEROSHARD_COMMON_STATUS_MACROS_H_
