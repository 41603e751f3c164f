// The address a worker advertises for Gloo, and the refusal of a loopback
// address offered to a peer on another host (comm/advertised_address.h).
#include "comm/advertised_address.h"

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "comm/collectives.h"

namespace zeroshard {
namespace {

TEST(AdvertisedAddressTest, Loopback) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.0.1.1"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_TRUE(IsLoopbackAddress("::ffff:127.0.0.2"));
  EXPECT_TRUE(IsLoopbackAddress("localhost"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.2"));
  EXPECT_FALSE(IsLoopbackAddress("fd00::2"));
  EXPECT_FALSE(IsLoopbackAddress("zeroshard-server-0.zeroshard-server"));
}

TEST(AdvertisedAddressTest, HostOfAddress) {
  EXPECT_EQ(*HostOfAddress("10.0.0.1:7070"), "10.0.0.1");
  EXPECT_EQ(*HostOfAddress("[fd00::1]:7070"), "fd00::1");
  EXPECT_EQ(*HostOfAddress("zeroshard-server-0.zeroshard-server:7070"),
            "zeroshard-server-0.zeroshard-server");
  EXPECT_FALSE(HostOfAddress("nohost").ok());
}

TEST(AdvertisedAddressTest, RouteToLoopbackServerIsLoopback) {
  auto a = LocalAddressToward("127.0.0.1:7070", absl::Seconds(5));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
  auto chosen = ChooseAdvertisedAddress("", "127.0.0.1:7070", absl::Seconds(5));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, "127.0.0.1");
}

TEST(AdvertisedAddressTest, ExplicitLoopbackWithRemoteServerIsRefused) {
  auto chosen =
      ChooseAdvertisedAddress("127.0.0.1", "10.9.8.7:7070", absl::Seconds(5));
  ASSERT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition)
      << chosen.status();
  EXPECT_TRUE(absl::StrContains(chosen.status().message(), "--hostname"));
  EXPECT_TRUE(absl::StrContains(chosen.status().message(), "10.9.8.7"));
  // Loopback servers: loopback is right.
  EXPECT_TRUE(
      ChooseAdvertisedAddress("127.0.0.1", "127.0.0.1:7070", absl::Seconds(5))
          .ok());
}

TEST(AdvertisedAddressTest, CheckPeerAddresses) {
  EXPECT_TRUE(CheckPeerAddresses(0, {"127.0.0.1", "127.0.0.1"}).ok());
  EXPECT_TRUE(CheckPeerAddresses(0, {"10.0.0.1", "10.0.0.2"}).ok());
  // A non-loopback rank cannot tell; the loopback one refuses.
  EXPECT_TRUE(CheckPeerAddresses(1, {"127.0.0.1", "10.0.0.2"}).ok());
  absl::Status s = CheckPeerAddresses(0, {"127.0.0.1", "10.0.0.2"});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "127.0.0.1")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "10.0.0.2")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--hostname")) << s;
}

// Rank 0 advertises 127.0.0.1; rank 1's record (a peer on another host) is
// already in the store: creating the group fails at once with the named
// error instead of waiting for Gloo's connect to time out.
TEST(AdvertisedAddressTest, GroupRefusesLoopbackToRemotePeerAtOnce) {
  InMemoryRendezvousStore store;
  ASSERT_TRUE(store.Set("zs/comm/g/addr/1", "10.0.0.2").ok());
  GroupOptions options;
  options.group = "g";
  options.timeout = absl::Seconds(30);
  options.hostname = "127.0.0.1";
  const absl::Time start = absl::Now();
  auto group = CreateWorkerGroup("gloo", 0, 2, &store, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition)
      << group.status();
  EXPECT_TRUE(absl::StrContains(group.status().message(), "127.0.0.1"));
  EXPECT_TRUE(absl::StrContains(group.status().message(), "10.0.0.2"));
  EXPECT_TRUE(absl::StrContains(group.status().message(), "--hostname"));
}

}  // namespace
}  // namespace zeroshard
