// A live run (client/live_run.h) is not replaced under its workers: while
// its pushes go on, zeroshard-ctl init and restore refuse (unless --force)
// and a second zeroshard-train on its servers refuses before starting any
// worker, each naming the run; a run that ended (its rank 0 marked it) is
// not live, so a rerun on the same servers and a restore go on.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "client/live_run.h"
#include "client/shard_cluster.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace live_run_test {

constexpr absl::Duration kTimeout = absl::Seconds(300);

// One push of zeros for every worker's ranges at the servers' step, as a
// newer attempt of their run would push it: the servers then report a
// push a moment ago, and this attempt marked no end.
absl::Status PushOnce(const LocalCluster& cluster, uint64_t attempt) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> probe,
                   ShardCluster::Connect(cluster.addresses(), {}));
  std::vector<absl::StatusOr<ServerStatus>> all = probe->InspectAll();
  if (all.empty() || !all[0].ok()) {
    return absl::InternalError("the servers did not answer Inspect");
  }
  const ServerStatus& s = *all[0];
  ASSIGN_OR_RETURN(FlatLayout layout,
                   FlatLayout::Create(s.manifest, cluster.addresses().size(),
                                      std::max<uint32_t>(1, s.num_workers)));
  ShardClientOptions o;
  o.run_id = s.run_id;
  o.attempt = attempt;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c,
                   ShardCluster::Connect(cluster.addresses(), o, layout));
  for (uint32_t w = 0; w < layout.num_workers(); ++w) {
    std::vector<FlatRange> ranges = layout.WorkerRanges(w);
    uint64_t n = 0;
    for (const FlatRange& r : ranges) n += r.size();
    std::vector<float> g(n, 0.0f);
    std::vector<GradSpan> spans;
    uint64_t at = 0;
    for (const FlatRange& r : ranges) {
      spans.push_back({r, DType::kFp32, g.data() + at});
      at += r.size();
    }
    RETURN_IF_ERROR(c->PushGrad(s.min_version, w, spans,
                                StepCommit{1.0, false, false}, false)
                        .status());
  }
  return absl::OkStatus();
}

TEST(LiveRunTest, InitRestoreAndASecondTrainingRefuseALiveRunOnly) {
  auto cluster = LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TrainDir dir("live_run");
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["steps"] = 2;
  const std::string config = dir.WriteConfig("c.json", cfg);
  const std::string given = "--server_addresses=" + (*cluster)->server_list();
  const std::string servers = "--servers=" + (*cluster)->server_list();
  const std::string missing = "--dir=" + dir.path("no-checkpoints");

  // A run that ends marks its end: a rerun on the same servers goes on, and
  // a restore is refused only for want of a checkpoint.
  TrainRun first = RunTrain(
      {"--config=" + config, "--out=" + dir.path("a"), "--quiet", given},
      kTimeout);
  ASSERT_TRUE(first.status.success()) << first.err;
  auto r = RunBinary("zeroshard-ctl", {"restore", servers, missing}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 1) << r->err;
  EXPECT_FALSE(absl::StrContains(r->err, "live run")) << r->err;

  // A newer attempt pushes and has not ended: a live run.
  ASSERT_TRUE(PushOnce(**cluster, 7).ok());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"restore", servers, missing},
        std::vector<std::string>{"init", servers, "--layers=2", "--heads=4",
                                 "--width=128", "--vocab=256",
                                 "--context=32"}}) {
    r = RunBinary("zeroshard-ctl", args, kTimeout);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status.code, 2) << args[0] << ": " << r->err;
    EXPECT_TRUE(absl::StrContains(r->err, "the servers serve a live run '"))
        << r->err;
    // Its push applied step 2 (zeros): the servers are at step 3.
    EXPECT_TRUE(absl::StrContains(r->err, "(attempt 7, at step 3;")) << r->err;
    EXPECT_TRUE(absl::StrContains(r->err, "or pass --force")) << r->err;
  }
  // --force goes past the check (and fails for want of a checkpoint).
  r = RunBinary("zeroshard-ctl", {"restore", servers, missing, "--force"},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 1) << r->err;
  EXPECT_FALSE(absl::StrContains(r->err, "live run")) << r->err;

  // A second training on its servers: refused before any worker starts.
  TrainRun second = RunTrain(
      {"--config=" + config, "--out=" + dir.path("b"), "--quiet", given},
      kTimeout);
  EXPECT_FALSE(second.status.success());
  EXPECT_TRUE(absl::StrContains(second.err, "serve a live run '")) << second.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("b") + "/logs/worker0.log"));
}

}  // namespace live_run_test
}  // namespace zeroshard::testing
