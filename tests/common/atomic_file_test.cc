// WriteFileAtomically: whole contents or nothing, no temporary left behind.
#include "common/atomic_file.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

using testing::ReadFile;

std::string MakeDir() { return testing::MakeTempDir("zs_atomic_"); }

TEST(AtomicFileTest, WritesReplacesAndLeavesNoTemporary) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("zs_atomic_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       "_" + std::to_string(reinterpret_cast<uintptr_t>(&dir) & 0xffff));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.bin").string();
  const std::string first("abc\0def", 7);
  ASSERT_TRUE(WriteFileAtomically(path, first).ok());
  EXPECT_EQ(ReadFile(path), first);
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(ReadFile(path), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // no temporary file left
  std::filesystem::remove_all(dir);
}

// A missing folder is said as one, of the file the caller named (not a
// refused permission on the temporary file's name).
// Asked for O_DIRECT, the writer sends aligned blocks past the page cache
// where the file system takes it and everything else through it: the file
// is the same bytes either way (an aligned block, an unaligned tail, then
// an aligned block again, which the page cache takes too).
TEST(AtomicFileTest, ADirectWriterWritesTheSameBytes) {
  const std::string dir = testing::MakeTempDir("zs_atomic_direct_");
  const std::string path = dir + "/direct.bin";
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> block(
      static_cast<char*>(std::aligned_alloc(kDirectIoAlign, 2 * kDirectIoAlign)));
  ASSERT_NE(block, nullptr);
  std::string want;
  for (size_t i = 0; i < 2 * kDirectIoAlign; ++i) block.get()[i] = static_cast<char>(i * 7 + 1);
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Open(path, /*direct=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Append(block.get(), 2 * kDirectIoAlign).ok());
  want.append(block.get(), 2 * kDirectIoAlign);
  ASSERT_TRUE(w->Append("tail", 4).ok());
  want += "tail";
  EXPECT_FALSE(w->direct()) << "an unaligned write left O_DIRECT on";
  ASSERT_TRUE(w->Append(block.get(), kDirectIoAlign).ok());
  want.append(block.get(), kDirectIoAlign);
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(testing::ReadFile(path), want);
}

TEST(AtomicFileTest, MissingDirectoryIsAClearError) {
  const absl::Status s =
      WriteFileAtomically("/nonexistent-zeroshard-dir/x/f.bin", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(s.message(), "cannot write /nonexistent-zeroshard-dir/x/f.bin: "
                         "no such directory /nonexistent-zeroshard-dir/x")
      << s;
}

TEST(AtomicFileTest, StreamedWriterShowsNothingBeforeCommit) {
  const std::string dir = MakeDir();
  const std::string path = dir + "/big.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  std::string want;
  {
    auto w = AtomicFileWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < 100; ++i) {
      const std::string piece(1000 + i, static_cast<char>('a' + i % 26));
      want += piece;
      ASSERT_TRUE(w->Append(piece.data(), piece.size()).ok());
      EXPECT_EQ(ReadFile(path), "old");  // the old contents until Commit
    }
    EXPECT_EQ(w->bytes_written(), want.size());
    ASSERT_TRUE(w->Commit().ok());
    EXPECT_EQ(w->Append("x", 1).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(ReadFile(path), want);
  {
    auto w = AtomicFileWriter::Open(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append("partial", 7).ok());
    // Dropped without Commit: nothing changes, nothing is left behind.
  }
  EXPECT_EQ(ReadFile(path), want);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

}  // namespace
}  // namespace zeroshard
