// KvClient against the fake service's key-value RPCs.
#include "client/kv_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_service.h"

namespace zeroshard {
namespace {

FlatLayout OneServer() {
  ModelManifest m;
  m.units = {{"a", {{"a.w", {64}}}}};
  return *FlatLayout::Create(m, 1, 1);
}

FlatLayout TwoServers() {
  ModelManifest m;
  m.units = {{"a", {{"a.w", {64}}}}};
  return *FlatLayout::Create(m, 2, 1);
}

// A 127.0.0.1 address that accepts connections (the kernel's backlog) and
// never answers: a hung server. Kept for the life of the process.
std::string SilentAddress() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  listen(fd, 64);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
}

std::string GoneAddress() {
  return absl::StrCat("127.0.0.1:", testing::UnusedPort());
}

double SecondsOf(const std::function<void()>& f) {
  const absl::Time t0 = absl::Now();
  f();
  return absl::ToDoubleSeconds(absl::Now() - t0);
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

TEST(KvClientTest, HoldersAreTheReplicasFromTheFirstOn) {
  const std::vector<std::string> s = {"a:1", "b:1", "c:1"};
  EXPECT_EQ(KvHolders(s, 1), (std::vector<std::string>{"a:1"}));
  EXPECT_EQ(KvHolders(s, 2), (std::vector<std::string>{"a:1", "b:1"}));
  EXPECT_EQ(KvHolders(s, 2, 2), (std::vector<std::string>{"c:1", "a:1"}));
  EXPECT_EQ(KvHolders(s, 9), s);
  EXPECT_EQ(KvHolders(s, 0), (std::vector<std::string>{"a:1"}));
}

// With replicas the store lives on two servers: every key on each.
TEST(KvClientTest, TwoHoldersEachKeepEveryKey) {
  testing::FakeShardCluster cluster(TwoServers());
  auto kv = *KvClient::Connect(cluster.addresses(), {"run", 0});
  ASSERT_EQ(kv->holders(), 2u);
  ASSERT_TRUE(kv->Set("a", "1").ok());
  for (const std::string& one : cluster.addresses()) {
    auto alone = *KvClient::Connect(one, {"run", 0});
    EXPECT_EQ(*alone->TryGet("a"), "1") << one;
  }
  EXPECT_EQ(*kv->Get("a", absl::Seconds(10)), "1");
  EXPECT_FALSE(kv->left(0) || kv->left(1));
}

// A holder that dies (its port then refuses), first or second: the calls
// go on from the other; the first call that meets it waits kKvGrace, the
// later ones do not call it.
TEST(KvClientTest, ADeadHolderCostsOneGraceOnce) {
  testing::FakeShardCluster live(OneServer());
  for (int dies : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("holder ", dies, " dies"));
    auto dying = std::make_unique<testing::FakeShardCluster>(OneServer());
    std::vector<std::string> holders = {live.addresses()[0],
                                        live.addresses()[0]};
    holders[dies] = dying->addresses()[0];
    auto kv = *KvClient::Connect(holders, {absl::StrCat("run", dies), 0});
    ASSERT_TRUE(kv->Set("a", "1").ok());
    dying.reset();
    const double first = SecondsOf([&] {
      ASSERT_TRUE(kv->Set("b", "2").ok());
    });
    EXPECT_LT(first, absl::ToDoubleSeconds(kKvGrace) + 3);
    EXPECT_TRUE(kv->left(dies));
    EXPECT_FALSE(kv->left(1 - dies));
    const double later = SecondsOf([&] {
      ASSERT_TRUE(kv->Set("c", "3").ok());
      EXPECT_EQ(*kv->TryGet("a"), "1");
      EXPECT_EQ(*kv->Get("b", absl::Seconds(10)), "2");
      EXPECT_TRUE(kv->Wait({"a", "b", "c"}, absl::Seconds(10)).ok());
    });
    EXPECT_LT(later, absl::ToDoubleSeconds(kKvGrace));
    // A sibling of another attempt shares what was left.
    EXPECT_TRUE(kv->WithAttempt(0)->left(dies));
  }
}

// A holder that has never answered (still starting, or hung: connections
// accepted, nothing answered) costs a call kKvGrace, not the call's
// deadline, and is not left: it is called again. A Wait ends at the first
// holder that has the keys.
TEST(KvClientTest, AHolderThatNeverAnsweredCostsTheGraceAndIsNotLeft) {
  testing::FakeShardCluster cluster(OneServer());
  for (const std::string& silent : {SilentAddress(), GoneAddress()}) {
    SCOPED_TRACE(silent);
    auto kv = *KvClient::Connect({silent, cluster.addresses()[0]},
                                 {"run", 0}, absl::Seconds(60));
    for (int call = 0; call < 2; ++call) {
      const double set = SecondsOf([&] { ASSERT_TRUE(kv->Set("a", "1").ok()); });
      EXPECT_LT(set, absl::ToDoubleSeconds(kKvGrace) + 3);
      EXPECT_FALSE(kv->left(0));
    }
    const double wait = SecondsOf([&] {
      EXPECT_TRUE(kv->Wait({"a"}, absl::Seconds(30)).ok());
    });
    EXPECT_LT(wait, 3);
  }
}

// A holder the caller's own failover left is not called at all.
TEST(KvClientTest, FollowsTheCallersFailover) {
  testing::FakeShardCluster cluster(OneServer());
  auto kv = *KvClient::Connect({SilentAddress(), cluster.addresses()[0]},
                               {"run", 0}, absl::Seconds(60));
  kv->FollowFailover([](size_t i) { return i == 0; });
  const double t = SecondsOf([&] {
    ASSERT_TRUE(kv->Set("a", "1").ok());
    EXPECT_EQ(*kv->TryGet("a"), "1");
  });
  EXPECT_LT(t, absl::ToDoubleSeconds(kKvGrace));
  EXPECT_FALSE(kv->left(0));
}

// A replacement's store starts empty: a key the other holder has is found.
TEST(KvClientTest, AnEmptyHolderDoesNotHideAKey) {
  testing::FakeShardCluster cluster(TwoServers());
  auto second = *KvClient::Connect(cluster.addresses()[1], {"run", 0});
  ASSERT_TRUE(second->Set("a", "1").ok());
  auto kv = *KvClient::Connect(cluster.addresses(), {"run", 0});
  EXPECT_EQ(*kv->TryGet("a"), "1");
  EXPECT_EQ(*kv->Get("a", absl::Seconds(10)), "1");
  EXPECT_EQ(kv->TryGet("nowhere").status().code(),
            absl::StatusCode::kNotFound);
}

// Every holder gone: the call's own error, bounded by its timeout.
TEST(KvClientTest, EveryHolderGoneIsBounded) {
  auto kv = *KvClient::Connect({GoneAddress(), GoneAddress()}, {"run", 0},
                               absl::Milliseconds(300));
  const double t = SecondsOf([&] {
    const absl::Status s = kv->Set("a", "b");
    EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
                s.code() == absl::StatusCode::kDeadlineExceeded) << s;
    const absl::Status w = kv->Wait({"a"}, absl::Milliseconds(300));
    EXPECT_TRUE(w.code() == absl::StatusCode::kUnavailable ||
                w.code() == absl::StatusCode::kDeadlineExceeded) << w;
  });
  EXPECT_LT(t, 5);
  EXPECT_FALSE(kv->left(0) || kv->left(1));
}

}  // namespace
}  // namespace zeroshard
