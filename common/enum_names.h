// One table per enum of the configuration: each value with its canonical
// name, defined once beside the enum, and read by everything that names the
// value — the XxxName functions, the JSON parser's choices, the resolved
// config's reader and writer, the command-line flags (server/placement.h).
//
//   inline constexpr EnumNames<Placement, 3> kPlacementNames = {{
//       {Placement::kHost, "host"}, {Placement::kPinned, "pinned"},
//       {Placement::kDevice, "device"}}};
//   NameOf(kPlacementNames, Placement::kHost);      // "host"
//   ValueOf(kPlacementNames, "pinned");             // Placement::kPinned
#ifndef ZEROSHARD_COMMON_ENUM_NAMES_H_
#define ZEROSHARD_COMMON_ENUM_NAMES_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace zeroshard {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, size_t N>
using EnumNames = std::array<EnumName<E>, N>;

// The value's name; "unknown" for a value outside the table.
template <typename E, size_t N>
constexpr const char* NameOf(const EnumNames<E, N>& table, E value) {
  for (const EnumName<E>& e : table) {
    if (e.value == value) return e.name;
  }
  return "unknown";
}

// The value of that exact name, or nullopt.
template <typename E, size_t N>
std::optional<E> ValueOf(const EnumNames<E, N>& table, absl::string_view name) {
  for (const EnumName<E>& e : table) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// The names in table order.
template <typename E, size_t N>
std::vector<std::string> NamesOf(const EnumNames<E, N>& table) {
  std::vector<std::string> out;
  for (const EnumName<E>& e : table) out.emplace_back(e.name);
  return out;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ENUM_NAMES_H_
