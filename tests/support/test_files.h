// Files for tests: a fresh temporary directory, a whole file in and out.
//
//   const std::string dir = testing::MakeTempDir("zs_ckpt_");
//   testing::WriteFile(dir + "/a.bin", bytes);
//   EXPECT_EQ(testing::ReadFile(dir + "/a.bin"), bytes);
#ifndef ZEROSHARD_TESTS_SUPPORT_TEST_FILES_H_
#define ZEROSHARD_TESTS_SUPPORT_TEST_FILES_H_

#include <string>

namespace zeroshard::testing {

// A fresh directory under the system temp dir named prefix + 6 random
// characters; "" when it cannot be made.
std::string MakeTempDir(const std::string& prefix);

// The whole file as bytes ("" when it cannot be read).
std::string ReadFile(const std::string& path);

// Replaces the file's contents with `bytes`; false when it cannot.
bool WriteFile(const std::string& path, const std::string& bytes);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_TEST_FILES_H_
