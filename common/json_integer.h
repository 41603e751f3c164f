// Reading a JSON integer into a C++ integer type without narrowing: the
// value is compared with T's range in its own signedness, so no cast can
// turn an out-of-range number (2^64 - 1 into an int) into an in-range one.
// For the strict readers of files zeroshard writes (common/resolved_config,
// common/checkpoint_manifest); include only from .cc files (nlohmann is a
// private dependency of common/).
//
//   uint32_t n;
//   if (ReadJsonInteger(j["num_servers"], &n) != JsonInteger::kOk) ...
#ifndef ZEROSHARD_COMMON_JSON_INTEGER_H_
#define ZEROSHARD_COMMON_JSON_INTEGER_H_

#include <cstdint>
#include <type_traits>
#include <utility>

#include "nlohmann/json.hpp"

namespace zeroshard {

enum class JsonInteger { kOk, kNotInteger, kNegative, kOutOfRange };

// On kOk, *out holds the value; otherwise *out is unchanged.
template <typename T>
JsonInteger ReadJsonInteger(const nlohmann::json& j, T* out) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (!j.is_number_integer()) return JsonInteger::kNotInteger;
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (!std::in_range<T>(v)) return JsonInteger::kOutOfRange;
    *out = static_cast<T>(v);
    return JsonInteger::kOk;
  }
  const int64_t v = j.get<int64_t>();
  if (std::is_unsigned_v<T> && v < 0) return JsonInteger::kNegative;
  if (!std::in_range<T>(v)) return JsonInteger::kOutOfRange;
  *out = static_cast<T>(v);
  return JsonInteger::kOk;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_JSON_INTEGER_H_
