#include "server/kv_store.h"

#include <atomic>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(KvStoreTest, SetGetAndLimits) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("a", "1").ok());
  ASSERT_TRUE(kv.Set("a", "2").ok());
  auto v = kv.Get("a");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, "2");
  EXPECT_FALSE(kv.Get("b")->has_value());
  EXPECT_EQ(kv.Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(std::string(KvStore::kMaxKeyBytes + 1, 'k'), "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set("big", std::string(KvStore::kMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvStoreTest, WaiterFiresWhenLastKeyArrives) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("x", "1").ok());
  std::atomic<int> woke{0};
  EXPECT_EQ(kv.WaitForKeys({"x"}, [&] { ++woke; }), 0u);
  const uint64_t id = kv.WaitForKeys({"x", "y", "z"}, [&] { ++woke; });
  ASSERT_NE(id, 0u);
  auto missing = kv.Missing(id);
  EXPECT_EQ(missing.size(), 2u);
  ASSERT_TRUE(kv.Set("y", "").ok());
  EXPECT_EQ(woke.load(), 0);
  ASSERT_TRUE(kv.Set("z", "").ok());
  EXPECT_EQ(woke.load(), 1);
  EXPECT_FALSE(kv.CancelWait(id));
  const uint64_t id2 = kv.WaitForKeys({"w"}, [&] { woke += 10; });
  EXPECT_TRUE(kv.CancelWait(id2));
  ASSERT_TRUE(kv.Set("w", "").ok());
  EXPECT_EQ(woke.load(), 1);
}

}  // namespace
}  // namespace zeroshard
