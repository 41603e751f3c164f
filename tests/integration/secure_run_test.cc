// zeroshard-train end to end with security on: servers, workers (rank 0 as
// admin, the others as worker) and the launcher's own calls over mutual TLS
// with certificates from scripts/make-dev-credentials.sh, giving the same
// weights bit for bit as a run on the launcher's default per-run tokens; and
// those default tokens kept where only this user can read them.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

TEST(SecureRunTest, MutualTlsRunEqualsTheTokenRunBitForBit) {
  if (!std::filesystem::exists("scripts/make-dev-credentials.sh")) {
    GTEST_SKIP() << "run from the source tree (CTest does)";
  }
  TrainDir dir("secure_run");
  const std::string creds = dir.path("creds");
  ASSERT_EQ(std::system(absl::StrCat("bash scripts/make-dev-credentials.sh '",
                                     creds, "' >/dev/null")
                            .c_str()),
            0);
  // Certificates only: every role must come from a certificate.
  std::filesystem::remove(creds + "/tokens");
  for (const char* role : {"worker", "ctl", "admin"}) {
    std::filesystem::remove(absl::StrCat(creds, "/", role, ".token"));
  }
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["steps"] = 3;
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  const std::string plain_cfg = dir.WriteConfig("plain.json", cfg);
  cfg["zeroshard"]["credentials"] = creds;
  const std::string tls_cfg = dir.WriteConfig("tls.json", cfg);

  TrainRun tls = RunTrain({"--config=" + tls_cfg, "--out=" + dir.path("tls"),
                           "--save_weights"},
                          absl::Seconds(240));
  ASSERT_TRUE(tls.status.success()) << tls.err;
  TrainRun plain = RunTrain({"--config=" + plain_cfg,
                             "--out=" + dir.path("plain"), "--save_weights"},
                            absl::Seconds(240));
  ASSERT_TRUE(plain.status.success()) << plain.err;
  const auto a = ReadWeights(dir.path("tls"));
  const auto b = ReadWeights(dir.path("plain"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(CompareWeights(a, b).bit_identical);
  EXPECT_EQ(NotTrained(dir.path("tls"), cfg), "");

  // The default run made per-run tokens, readable by this user only.
  struct stat st;
  ASSERT_EQ(::stat(dir.path("plain/credentials").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(dir.path("plain/credentials/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
  // The TLS run made none: it used the configured directory.
  EXPECT_FALSE(std::filesystem::exists(dir.path("tls/credentials")));
}

}  // namespace
}  // namespace zeroshard::testing
