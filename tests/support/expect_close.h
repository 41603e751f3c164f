// Element-wise comparison for the kernel tests: every element of `got`
// within abs + rel * |want| of `want` (a NaN in `got` where `want` has a
// number fails, so an unwritten NaN sentinel shows), the first misses
// reported with the two sides' names.
//
//   ExpectAllClose(device, twin, 1e-5f, 1e-4f, "y", "device", "twin");
#ifndef ZEROSHARD_TESTS_SUPPORT_EXPECT_CLOSE_H_
#define ZEROSHARD_TESTS_SUPPORT_EXPECT_CLOSE_H_

#include <vector>

namespace zeroshard::testing {

void ExpectAllClose(const std::vector<float>& got,
                    const std::vector<float>& want, float abs, float rel,
                    const char* what, const char* got_name,
                    const char* want_name);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_EXPECT_CLOSE_H_
