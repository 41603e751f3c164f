#include "server/kv_store.h"

#include <atomic>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

const KvScope kRun{"run", 0};

TEST(KvStoreTest, SetGetAndBadInput) {
  KvStore kv;
  ASSERT_TRUE(kv.Set(kRun, "a", "1").ok());
  ASSERT_TRUE(kv.Set(kRun, "a", "2").ok());
  auto v = kv.Get(kRun, "a");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, "2");
  EXPECT_FALSE(kv.Get(kRun, "b")->has_value());
  EXPECT_EQ(kv.Set(kRun, "", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      kv.Set(kRun, std::string(KvStore::kMaxKeyBytes + 1, 'k'), "x").code(),
      absl::StatusCode::kInvalidArgument);
  // Keys of one run are invisible to another.
  EXPECT_FALSE(kv.Get({"other", 0}, "a")->has_value());
}

TEST(KvStoreTest, RunIdsArePrintableAsciiOfBoundedLength) {
  KvStore kv;
  for (const std::string& bad :
       {std::string(), std::string(KvStore::kMaxRunIdBytes + 1, 'r'),
        std::string("tab\there"), std::string("nl\n"), std::string("\x7f"),
        std::string("caf\xc3\xa9")}) {
    absl::Status s = kv.Set({bad, 0}, "k", "v");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("run_id"), std::string::npos) << s;
  }
  EXPECT_TRUE(
      kv.Set({std::string(KvStore::kMaxRunIdBytes, '~'), 0}, "k", "v").ok());
  EXPECT_TRUE(kv.Set({"train-1/x y", 0}, "k", "v").ok());
}

TEST(KvStoreTest, LimitsPerRunAnswerResourceExhaustedNamingTheLimit) {
  KvStore::Limits limits;
  limits.max_keys_per_run = 3;
  limits.max_value_bytes = 100;
  limits.max_bytes_per_run = 250;
  limits.max_runs = 2;
  KvStore kv(limits);

  absl::Status s = kv.Set(kRun, "big", std::string(101, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("limit per value is 100"), std::string::npos)
      << s;

  ASSERT_TRUE(kv.Set(kRun, "k1", std::string(98, 'v')).ok());  // 100 bytes
  ASSERT_TRUE(kv.Set(kRun, "k2", std::string(98, 'v')).ok());  // 200
  s = kv.Set(kRun, "k3", std::string(98, 'v'));                // 300 > 250
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("limit of bytes per run of 250"),
            std::string::npos)
      << s;
  EXPECT_FALSE(kv.Get(kRun, "k3")->has_value());
  // Overwriting counts the new size, not both.
  EXPECT_TRUE(kv.Set(kRun, "k2", std::string(40, 'v')).ok());  // 142
  EXPECT_EQ(kv.Usage("run").bytes, 142u);
  ASSERT_TRUE(kv.Set(kRun, "k3", "").ok());
  s = kv.Set(kRun, "k4", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("limit of keys per run"), std::string::npos)
      << s;
  EXPECT_TRUE(kv.Set(kRun, "k3", "again").ok());  // not a new key

  // Another run has limits of its own; a third is over the cap of runs.
  EXPECT_TRUE(kv.Set({"second", 0}, "k1", std::string(98, 'v')).ok());
  s = kv.Set({"third", 0}, "k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("limit of runs"), std::string::npos) << s;
  // Keeping one run frees the others' room.
  kv.RetainOnlyRun("run");
  EXPECT_EQ(kv.Usage("second").keys, 0u);
  EXPECT_TRUE(kv.Set({"third", 0}, "k", "v").ok());
  EXPECT_EQ(kv.Usage("run").keys, 3u);
}

// The bug report: a failed attempt's rendezvous keys stayed on the live
// servers and made the next attempt hang.
TEST(KvStoreTest, ANewerAttemptDropsTheOlderAttemptsKeys) {
  KvStore kv;
  ASSERT_TRUE(kv.Set({"run", 0}, "zs/comm/0", "dead-address").ok());
  ASSERT_TRUE(kv.Set({"run", 0}, "zs/comm/1", "dead-address").ok());
  EXPECT_EQ(kv.Usage("run").keys, 2u);
  // The next attempt's first call, a read, already sees none of them.
  auto v = kv.Get({"run", 1}, "zs/comm/0");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  EXPECT_EQ(kv.Usage("run").keys, 0u);
  EXPECT_EQ(kv.Usage("run").bytes, 0u);
  EXPECT_EQ(kv.Usage("run").attempt, 1u);
  // A wait of the new attempt waits for the new attempt's key.
  std::atomic<int> woke{0};
  auto id = kv.WaitForKeys({"run", 1}, {"zs/comm/1"},
                           [&](absl::Status s) { woke += s.ok() ? 1 : 100; });
  ASSERT_TRUE(id.ok());
  EXPECT_NE(*id, 0u);
  ASSERT_TRUE(kv.Set({"run", 1}, "zs/comm/1", "live-address").ok());
  EXPECT_EQ(woke.load(), 1);
  // Other runs keep their keys.
  ASSERT_TRUE(kv.Set({"other", 0}, "k", "v").ok());
  ASSERT_TRUE(kv.Set({"run", 5}, "k", "v").ok());
  EXPECT_TRUE(kv.Get({"other", 0}, "k")->has_value());
}

// A Set of a newer attempt that is refused (over a limit) moves nothing:
// the older attempt's keys, its waiters and the attempt stay.
TEST(KvStoreTest, ARefusedSetOfANewerAttemptDropsNothing) {
  KvStore::Limits limits;
  limits.max_value_bytes = 100;
  limits.max_bytes_per_run = 50;
  limits.max_runs = 2;
  KvStore kv(limits);
  ASSERT_TRUE(kv.Set({"run", 0}, "k", "v").ok());
  std::atomic<int> woke{0};
  auto id = kv.WaitForKeys({"run", 0}, {"later"},
                           [&](absl::Status s) { woke += s.ok() ? 1 : 100; });
  ASSERT_TRUE(id.ok());
  const absl::Status s = kv.Set({"run", 1}, "big", std::string(80, 'v'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(kv.Usage("run").attempt, 0u);
  EXPECT_EQ(kv.Usage("run").keys, 1u);
  EXPECT_EQ(woke.load(), 0);
  EXPECT_EQ(**kv.Get({"run", 0}, "k"), "v");
  // A refused Set of an unknown run creates none: the second slot of runs
  // is still free.
  EXPECT_FALSE(kv.Set({"new-run", 0}, "big", std::string(80, 'v')).ok());
  EXPECT_TRUE(kv.Set({"third", 0}, "k", "v").ok());
  // The older attempt goes on.
  ASSERT_TRUE(kv.Set({"run", 0}, "later", "x").ok());
  EXPECT_EQ(woke.load(), 1);
}

TEST(KvStoreTest, AnOlderAttemptIsAborted) {
  KvStore kv;
  ASSERT_TRUE(kv.Set({"run", 3}, "k", "v").ok());
  for (uint64_t old : {0u, 2u}) {
    EXPECT_EQ(kv.Set({"run", old}, "k", "x").code(),
              absl::StatusCode::kAborted);
    EXPECT_EQ(kv.Get({"run", old}, "k").status().code(),
              absl::StatusCode::kAborted);
    absl::StatusOr<uint64_t> w =
        kv.WaitForKeys({"run", old}, {"k"}, [](absl::Status) {});
    EXPECT_EQ(w.status().code(), absl::StatusCode::kAborted);
  }
  EXPECT_EQ(**kv.Get({"run", 3}, "k"), "v");
}

TEST(KvStoreTest, WaitersOfAnOlderAttemptAreAbortedWhenANewerOneCalls) {
  KvStore kv;
  absl::Status got = absl::UnknownError("not called");
  auto id = kv.WaitForKeys({"run", 0}, {"never"},
                           [&](absl::Status s) { got = s; });
  ASSERT_TRUE(id.ok());
  ASSERT_NE(*id, 0u);
  ASSERT_TRUE(kv.Set({"run", 1}, "other", "v").ok());
  EXPECT_EQ(got.code(), absl::StatusCode::kAborted) << got;
  EXPECT_NE(got.message().find("attempt 1"), std::string::npos) << got;
  EXPECT_FALSE(kv.CancelWait(*id));
  // RetainOnlyRun fails other runs' waiters too.
  auto other = kv.WaitForKeys({"other", 0}, {"never"},
                              [&](absl::Status s) { got = s; });
  ASSERT_TRUE(other.ok());
  kv.RetainOnlyRun("run");
  EXPECT_EQ(got.code(), absl::StatusCode::kPermissionDenied) << got;
}

TEST(KvStoreTest, WaiterFiresWhenLastKeyArrives) {
  KvStore kv;
  ASSERT_TRUE(kv.Set(kRun, "x", "1").ok());
  std::atomic<int> woke{0};
  auto wake = [&](absl::Status s) { woke += s.ok() ? 1 : 1000; };
  EXPECT_EQ(*kv.WaitForKeys(kRun, {"x"}, wake), 0u);
  const uint64_t id = *kv.WaitForKeys(kRun, {"x", "y", "z"}, wake);
  ASSERT_NE(id, 0u);
  auto missing = kv.Missing(id);
  EXPECT_EQ(missing.size(), 2u);
  ASSERT_TRUE(kv.Set(kRun, "y", "").ok());
  EXPECT_EQ(woke.load(), 0);
  ASSERT_TRUE(kv.Set(kRun, "z", "").ok());
  EXPECT_EQ(woke.load(), 1);
  EXPECT_FALSE(kv.CancelWait(id));
  const uint64_t id2 =
      *kv.WaitForKeys(kRun, {"w"}, [&](absl::Status) { woke += 10; });
  EXPECT_TRUE(kv.CancelWait(id2));
  ASSERT_TRUE(kv.Set(kRun, "w", "").ok());
  EXPECT_EQ(woke.load(), 1);
}

}  // namespace
}  // namespace zeroshard
