// KvClient against the fake service's key-value RPCs.
#include "client/kv_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_service.h"

namespace zeroshard {
namespace {

FlatLayout OneServer() {
  ModelManifest m;
  m.units = {{"a", {{"a.w", {64}}}}};
  return *FlatLayout::Create(m, 1, 1);
}

TEST(KvClientTest, SetGetWait) {
  testing::FakeShardCluster cluster(OneServer());
  auto kv = *KvClient::Connect(cluster.addresses()[0], {"run", 0});
  EXPECT_EQ(kv->TryGet("a").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(kv->Set("a", "1").ok());
  EXPECT_EQ(*kv->Get("a", absl::Seconds(10)), "1");
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(kv->Set("b", std::string("\0x", 2)).ok());
  });
  auto b = kv->Get("b", absl::Seconds(20));
  setter.join();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, std::string("\0x", 2));
  EXPECT_TRUE(kv->Wait({"a", "b"}, absl::Seconds(10)).ok());
}

TEST(KvClientTest, MissingKeyTimesOutNamingIt) {
  testing::FakeShardCluster cluster(OneServer());
  auto kv = *KvClient::Connect(cluster.addresses()[0], {"run", 0});
  auto r = kv->Get("never", absl::Milliseconds(100));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("never"), std::string::npos);
}

TEST(KvClientTest, UnreachableServerIsBounded) {
  auto kv = *KvClient::Connect(
      absl::StrCat("127.0.0.1:", testing::UnusedPort()), {"run", 0},
      absl::Milliseconds(300));
  absl::Status s = kv->Set("a", "b");
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(KvClient::Connect("nope", {"run", 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
