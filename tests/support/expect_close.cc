#include "tests/support/expect_close.h"

#include <cmath>

#include "gtest/gtest.h"

namespace zeroshard::testing {

void ExpectAllClose(const std::vector<float>& got,
                    const std::vector<float>& want, float abs, float rel,
                    const char* what, const char* got_name,
                    const char* want_name) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = abs + rel * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (++misses <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: " << got_name << " "
                      << got[i] << " " << want_name << " " << want[i]
                      << " (tolerance " << tol << ")";
      }
    }
  }
  EXPECT_EQ(misses, 0u) << what << ": " << misses << " of " << got.size()
                        << " elements out of tolerance";
}

}  // namespace zeroshard::testing
