// Whether this translation unit is built with AddressSanitizer: tests whose
// bound is on process memory (RSS) skip it there, since ASan's shadow memory
// and quarantine are part of every process's RSS.
//
//   if (zeroshard::testing::kAddressSanitizer) GTEST_SKIP() << "...";
#ifndef ZEROSHARD_TESTS_SUPPORT_SANITIZERS_H_
#define ZEROSHARD_TESTS_SUPPORT_SANITIZERS_H_

namespace zeroshard::testing {

#if defined(__SANITIZE_ADDRESS__)  // GCC
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)       // Clang
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_SANITIZERS_H_
