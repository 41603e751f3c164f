// WriteFileAtomically: whole contents or nothing, no temporary left behind.
#include "common/atomic_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

std::string Read(const std::filesystem::path& p) {
  std::stringstream ss;
  ss << std::ifstream(p, std::ios::binary).rdbuf();
  return ss.str();
}

TEST(AtomicFileTest, WritesReplacesAndLeavesNoTemporary) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("zs_atomic_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       "_" + std::to_string(reinterpret_cast<uintptr_t>(&dir) & 0xffff));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.bin").string();
  const std::string first("abc\0def", 7);
  ASSERT_TRUE(WriteFileAtomically(path, first).ok());
  EXPECT_EQ(Read(path), first);
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(Read(path), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // no temporary file left
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, MissingDirectoryIsAClearError) {
  const absl::Status s =
      WriteFileAtomically("/nonexistent-zeroshard-dir/x/f.bin", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("/nonexistent-zeroshard-dir/x/f.bin"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace zeroshard
