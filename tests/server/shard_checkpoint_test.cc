// Shard checkpoint files: what is written reads back bit for bit, by range;
// a file cut short anywhere, a bit flipped anywhere, a wrong magic or a
// missing file is refused with an error naming the file.
#include "server/shard_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

using testing::ReadFile;
using testing::WriteFile;

std::string MakeDir() { return testing::MakeTempDir("zs_ckpt_"); }

struct Shard {
  v1::ShardCheckpointHeader header;
  std::vector<float> master, exp_avg, exp_avg_sq;
  ShardCheckpointContents contents() const {
    return {header, master.data(), {exp_avg.data(), exp_avg_sq.data()}};
  }
};

Shard RandomShard(std::mt19937_64& rng, uint64_t offset, uint64_t n) {
  Shard s;
  s.header.set_server_index(1);
  s.header.set_num_servers(3);
  s.header.mutable_owned()->set_offset(offset);
  s.header.mutable_owned()->set_length(n);
  s.header.set_chunk_elems(256);
  s.header.set_step(41);
  const uint64_t chunks = (n + 255) / 256;
  for (uint64_t c = 0; c < chunks; ++c) {
    s.header.add_chunk_versions(41);
    s.header.add_chunk_adam_steps(40);
  }
  s.header.set_model_fingerprint(rng());
  s.header.mutable_optimizer()->set_lr(1e-3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* a : {&s.master, &s.exp_avg, &s.exp_avg_sq}) {
    a->resize(n);
    for (float& x : *a) x = u(rng);
  }
  return s;
}

// The stream writes exactly the bytes its header implies: more is refused
// at the Append, fewer at Finish, and neither leaves a file (or its
// temporary) behind.
TEST(ShardCheckpointTest, AStreamOfAnyOtherSizeThanItsHeaderLeavesNoFile) {
  std::mt19937_64 rng(5);
  const std::string dir = MakeDir();
  const Shard s = RandomShard(rng, 0, 4096);
  const uint64_t body = 3 * 4096 * sizeof(float);
  auto zeros = [](char* dst, uint64_t, size_t n) {
    std::memset(dst, 0, n);
    return absl::OkStatus();
  };
  for (const uint64_t appended : {body + 1, body - 1}) {
    SCOPED_TRACE(appended);
    const std::string path = dir + "/shard.bin";
    auto w = ShardFileStream::Open(path, s.header);
    ASSERT_TRUE(w.ok()) << w.status();
    const absl::Status a = (*w)->Append(appended, zeros);
    if (appended > body) {
      EXPECT_EQ(a.code(), absl::StatusCode::kInternal) << a;
    } else {
      ASSERT_TRUE(a.ok()) << a;
      EXPECT_EQ((*w)->Finish().status().code(), absl::StatusCode::kInternal);
    }
    w->reset();
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a temporary file is left";
  }
  // A fill's error ends the file and is the answer.
  auto w = ShardFileStream::Open(dir + "/shard.bin", s.header);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Append(body, [](char*, uint64_t, size_t) {
                  return absl::CancelledError("stopped");
                }).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ((*w)->Finish().status().code(),
            absl::StatusCode::kFailedPrecondition);
  w->reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(ShardCheckpointTest, WrittenShardReadsBackBitForBitByRange) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);  // to repeat a failure
  std::mt19937_64 rng(seed);
  const std::string dir = MakeDir();
  // The last spans several of the writer's 4 MiB buffers, with a tail.
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{1000},
                     uint64_t{300000}, uint64_t{1500001}}) {
    SCOPED_TRACE(n);
    const Shard s = RandomShard(rng, 5000, n);
    const std::string path = dir + "/shard.bin";
    auto sum = WriteShardCheckpoint(path, s.contents());
    ASSERT_TRUE(sum.ok()) << sum.status();
    auto info = VerifyShardCheckpoint(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->checksum, *sum);
    EXPECT_EQ(info->header.SerializeAsString(), s.header.SerializeAsString());
    const std::vector<float>* arrays[] = {&s.master, &s.exp_avg,
                                          &s.exp_avg_sq};
    for (int a = 0; a < 3; ++a) {
      // The whole array, then a random sub-range (what resharding reads).
      std::vector<FlatRange> ranges = {{5000, 5000 + n}};
      if (n > 0) {
        const uint64_t b = rng() % n, e = b + rng() % (n - b + 1);
        ranges.push_back({5000 + b, 5000 + e});
      }
      for (const FlatRange& r : ranges) {
        std::vector<float> out(r.size(), -7.0f);
        ASSERT_TRUE(ReadShardCheckpointRange(path, *info,
                                             static_cast<size_t>(a), r,
                                             out.data())
                        .ok());
        // memcmp's pointers must not be null, even for 0 bytes (UBSan).
        if (out.empty()) continue;
        EXPECT_EQ(std::memcmp(out.data(),
                              arrays[a]->data() + (r.begin - 5000),
                              r.size() * sizeof(float)),
                  0);
      }
    }
    std::vector<float> one(1);
    EXPECT_EQ(ReadShardCheckpointRange(path, *info, /*master=*/0,
                                       {4999, 5000}, one.data())
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Only the file itself is left: no temporary.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(ShardCheckpointTest, TruncatedFlippedOrForeignFilesAreRefused) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);  // to repeat a failure
  std::mt19937_64 rng(seed);
  const std::string dir = MakeDir();
  const std::string path = dir + "/shard.bin";
  const Shard s = RandomShard(rng, 0, 20000);
  ASSERT_TRUE(WriteShardCheckpoint(path, s.contents()).ok());
  const std::string good = ReadFile(path);
  const std::string bad = dir + "/bad.bin";
  for (int trial = 0; trial < 40; ++trial) {
    // Cut at a random place.
    WriteFile(bad, good.substr(0, rng() % good.size()));
    auto cut = VerifyShardCheckpoint(bad);
    ASSERT_FALSE(cut.ok());
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(cut.status().message().find(bad), std::string::npos);
    // One bit flipped anywhere: header, arrays or the checksum itself.
    std::string flipped = good;
    flipped[rng() % flipped.size()] ^= static_cast<char>(1 << (rng() % 8));
    WriteFile(bad, flipped);
    auto flip = VerifyShardCheckpoint(bad);
    ASSERT_FALSE(flip.ok()) << "a flipped bit went unnoticed";
    EXPECT_EQ(flip.status().code(), absl::StatusCode::kDataLoss)
        << flip.status();
  }
  WriteFile(bad, good + "x");  // extended: the trailer is no longer the sum
  EXPECT_EQ(VerifyShardCheckpoint(bad).status().code(),
            absl::StatusCode::kDataLoss);
  std::string foreign = good;
  foreign[0] = 'X';
  WriteFile(bad, foreign);
  EXPECT_NE(VerifyShardCheckpoint(bad).status().message().find("magic"),
            std::string::npos);
  auto missing = VerifyShardCheckpoint(dir + "/nope.bin");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);
}

// A file whose checksum is right but whose header lies (made by hand here):
// refused by the header checks, not trusted because the checksum matched.
TEST(ShardCheckpointTest, ForgedHeaderWithAValidChecksumIsRefused) {
  std::mt19937_64 rng(7);
  const std::string path = MakeDir() + "/forged.bin";
  Shard s = RandomShard(rng, 0, 100);
  s.header.set_chunk_elems(~uint64_t{63});  // 2^64 - 64: one chunk
  s.header.clear_chunk_versions();
  s.header.clear_chunk_adam_steps();
  // The writer refuses it...
  EXPECT_EQ(WriteShardCheckpoint(path, s.contents()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // ... and so does the reader when the bytes are made by hand.
  const std::string header = s.header.SerializeAsString();
  const uint32_t header_bytes = static_cast<uint32_t>(header.size());
  std::string bytes(kShardCheckpointMagic, 8);
  bytes.append(reinterpret_cast<const char*>(&header_bytes), 4);
  bytes += header;
  for (const auto* a : {&s.master, &s.exp_avg, &s.exp_avg_sq}) {
    bytes.append(reinterpret_cast<const char*>(a->data()), a->size() * 4);
  }
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), 8);
  WriteFile(path, bytes);
  auto info = VerifyShardCheckpoint(path);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(info.status().message().find("inconsistent"), std::string::npos)
      << info.status();
}

// A file names its optimizer's state slots; it holds master and one array
// per slot, in order, whatever their number. Without names it is AdamW's
// two (files written before slots were named).
TEST(ShardCheckpointTest, AFileHoldsTheSlotsItsHeaderNames) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::string path = MakeDir() + "/shard.bin";
  Shard base = RandomShard(rng, 64, 700);
  EXPECT_EQ(ShardCheckpointSlots(base.header),
            (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  for (int slots : {0, 1, 3}) {
    SCOPED_TRACE(slots);
    v1::ShardCheckpointHeader h = base.header;
    std::vector<std::vector<float>> arrays(1 + slots);
    std::vector<std::string> names;
    for (int k = 0; k < slots; ++k) {
      names.push_back(absl::StrCat("slot", k));
      h.add_state_slots(names.back());
    }
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& a : arrays) {
      a.resize(700);
      for (float& x : a) x = u(rng);
    }
    ShardCheckpointContents c{h, arrays[0].data(), {}};
    for (int k = 0; k < slots; ++k) c.slots.push_back(arrays[1 + k].data());
    if (slots == 0) {
      // No names: AdamW's two arrays are wanted, and none given is refused.
      EXPECT_EQ(WriteShardCheckpoint(path, c).status().code(),
                absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(WriteShardCheckpoint(path, c).ok());
    auto info = VerifyShardCheckpoint(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(ShardCheckpointSlots(info->header), names);
    EXPECT_EQ(info->file_bytes,
              info->arrays_offset + (1 + slots) * 700 * sizeof(float) + 8);
    for (int a = 0; a <= slots; ++a) {
      std::vector<float> out(700);
      ASSERT_TRUE(ReadShardCheckpointRange(path, *info, a, {64, 764},
                                           out.data()).ok());
      EXPECT_EQ(out, arrays[a]) << "array " << a;
    }
    std::vector<float> out(1);
    EXPECT_EQ(ReadShardCheckpointRange(path, *info, 1 + slots, {64, 65},
                                       out.data()).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // A slot named twice is an inconsistent header.
  v1::ShardCheckpointHeader twice = base.header;
  twice.add_state_slots("m");
  twice.add_state_slots("m");
  EXPECT_EQ(WriteShardCheckpoint(path, {twice, base.master.data(),
                                        {base.exp_avg.data(),
                                         base.exp_avg_sq.data()}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A range is read from the file that was verified, not from one renamed
// over it since.
TEST(ShardCheckpointTest, FileReplacedAfterVerificationIsRefused) {
  std::mt19937_64 rng(8);
  const std::string path = MakeDir() + "/shard.bin";
  ASSERT_TRUE(WriteShardCheckpoint(path, RandomShard(rng, 0, 500).contents())
                  .ok());
  auto info = VerifyShardCheckpoint(path);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(WriteShardCheckpoint(path, RandomShard(rng, 0, 500).contents())
                  .ok());
  std::vector<float> out(10);
  const absl::Status s = ReadShardCheckpointRange(
      path, *info, /*exp_avg=*/1, {0, 10}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST(ShardCheckpointTest, InconsistentHeadersAreNotWritten) {
  std::mt19937_64 rng(1);
  const std::string path = MakeDir() + "/shard.bin";
  Shard s = RandomShard(rng, 0, 1000);
  s.header.add_chunk_versions(41);  // one version too many
  EXPECT_EQ(WriteShardCheckpoint(path, s.contents()).status().code(),
            absl::StatusCode::kInvalidArgument);
  s = RandomShard(rng, 0, 1000);
  s.header.set_server_index(3);  // of 3
  EXPECT_EQ(WriteShardCheckpoint(path, s.contents()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace zeroshard
