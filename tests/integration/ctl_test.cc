// zeroshard-ctl run as a process against real servers: init, smoke, inspect
// (table and JSON), health (before and after a server dies), layout offline,
// and bad flags.
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace zeroshard {
namespace {

using testing::RunBinary;

constexpr absl::Duration kTimeout = absl::Seconds(120);

std::vector<std::string> Shape() {
  return {"--layers=2", "--heads=2", "--width=64", "--vocab=96",
          "--context=32", "--workers=2"};
}

// zeroshard-ctl init of the tests' shape on `servers` ("--servers=..."),
// with `flags`.
absl::StatusOr<testing::CommandResult> InitWithShape(
    const std::string& servers, const std::vector<std::string>& flags) {
  std::vector<std::string> init = {"init", servers};
  init.insert(init.end(), flags.begin(), flags.end());
  for (const auto& f : Shape()) init.push_back(f);
  return RunBinary("zeroshard-ctl", init, kTimeout);
}

TEST(CtlTest, InitSmokeInspectHealth) {
  auto cluster = testing::LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string servers = "--servers=" + (*cluster)->server_list();

  std::vector<std::string> init = {"init", servers, "--seed=3", "--lr=0.01",
                                   R"(--param_groups={"norms": {"lr_scale": 2}})"};
  for (const auto& f : Shape()) init.push_back(f);
  auto r = RunBinary("zeroshard-ctl", init, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  EXPECT_NE(r->out.find((*cluster)->addresses()[1]), std::string::npos);

  r = RunBinary("zeroshard-ctl", {"smoke", servers, "--steps=3"}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;
  for (int s = 0; s < 3; ++s) {
    EXPECT_NE(r->out.find("step " + std::to_string(s) + ":"), std::string::npos)
        << r->out;
  }

  r = RunBinary("zeroshard-ctl", {"inspect", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  EXPECT_NE(r->out.find("versions"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("3..3"), std::string::npos) << r->out;
  // The groups Init carried: Hugging Face's default with the norms' lr scaled.
  EXPECT_NE(r->out.find("parameter groups: matrices weight_decay 0.01 lr_scale 1"),
            std::string::npos) << r->out;
  EXPECT_NE(r->out.find("biases weight_decay 0 lr_scale 1"), std::string::npos)
      << r->out;
  EXPECT_NE(r->out.find("norms weight_decay 0 lr_scale 2"), std::string::npos)
      << r->out;
  for (const auto& a : (*cluster)->addresses()) {
    EXPECT_NE(r->out.find(a), std::string::npos) << r->out;
  }

  r = RunBinary("zeroshard-ctl", {"inspect", "--json", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  nlohmann::json j = nlohmann::json::parse(r->out);
  ASSERT_EQ(j["servers"].size(), 2u);
  uint64_t covered = 0;
  for (const auto& s : j["servers"]) {
    EXPECT_TRUE(s["ok"].get<bool>());
    EXPECT_EQ(s["min_version"].get<uint64_t>(), 3u);
    EXPECT_EQ(s["adam_step"].get<uint64_t>(), 3u);
    covered += s["owned_end"].get<uint64_t>() - s["owned_begin"].get<uint64_t>();
    EXPECT_EQ(s["total_elems"].get<uint64_t>(),
              j["servers"][0]["total_elems"].get<uint64_t>());
  }
  EXPECT_EQ(covered, j["servers"][0]["total_elems"].get<uint64_t>());
  const nlohmann::json& groups = j["servers"][0]["param_groups"];
  ASSERT_EQ(groups.size(), 4u) << groups;
  EXPECT_EQ(groups[1]["name"], "embeddings");
  EXPECT_EQ(groups[1]["weight_decay"].get<double>(), 0.01);
  EXPECT_EQ(groups[3]["name"], "norms");
  EXPECT_EQ(groups[3]["lr_scale"].get<double>(), 2.0);
  uint64_t grouped = 0;
  for (const auto& g : groups) grouped += g["elems"].get<uint64_t>();
  EXPECT_GT(grouped, 0u);
  EXPECT_LE(grouped, covered);

  r = RunBinary("zeroshard-ctl", {"health", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.success()) << r->out << r->err;
  EXPECT_NE(r->out.find("SERVING"), std::string::npos);

  (*cluster)->Kill(0);
  r = RunBinary("zeroshard-ctl", {"health", servers, "--timeout=3s"}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.exited);
  EXPECT_EQ(r->status.code, 1) << r->out << r->err;
  EXPECT_NE(r->err.find("1 of 2"), std::string::npos) << r->err;
}

// Two copies of each slot (docs/DESIGN.md, "Replicas"): init makes them,
// inspect shows where each slot's copies are, and a one-copy writer is
// refused rather than let the copies differ.
TEST(CtlTest, ReplicasAreMadeShownAndGuarded) {
  auto cluster = testing::LocalCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string servers = "--servers=" + (*cluster)->server_list();
  auto r = InitWithShape(servers, {"--replicas=2"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;

  r = RunBinary("zeroshard-ctl", {"smoke", servers, "--steps=2"}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->status.success());
  EXPECT_NE((r->out + r->err).find("keeps 2 copies of each slot"),
            std::string::npos)
      << r->out << r->err;

  r = RunBinary("zeroshard-ctl", {"smoke", servers, "--steps=2", "--replicas=2"},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;

  r = RunBinary("zeroshard-ctl", {"inspect", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  EXPECT_NE(r->out.find("same version"), std::string::npos) << r->out;
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_NE(r->out.find(absl::StrCat("server ", slot, " at 2..2  server ",
                                       (slot + 1) % 3, " at 2..2  yes")),
              std::string::npos)
        << r->out;
  }
  (*cluster)->Kill(1);
  r = RunBinary("zeroshard-ctl", {"inspect", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->out.find("one copy left"), std::string::npos) << r->out;
}

// A registered rule through the tools: init --optimizer=sgd, smoke steps,
// and inspect --json naming the rule and its params; an unregistered name
// is a usage error listing the registered ones.
TEST(CtlTest, InitWithARegisteredRule) {
  auto cluster = testing::LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string servers = "--servers=" + (*cluster)->server_list();
  auto r = InitWithShape(servers,
                         {"--optimizer=sgd", "--lr=0.1", "--weight_decay=0"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  r = RunBinary("zeroshard-ctl", {"smoke", servers, "--steps=2"}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;
  r = RunBinary("zeroshard-ctl", {"inspect", "--json", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  const nlohmann::json o = nlohmann::json::parse(r->out)["servers"][0]["optimizer"];
  ASSERT_EQ(o["kind"], "sgd") << o;
  EXPECT_EQ(o["lr"].get<double>(), 0.1);
  EXPECT_EQ(o["momentum"].get<double>(), 0.0);
  EXPECT_EQ(o["nesterov"].get<double>(), 0.0);
  r = InitWithShape(servers,
                    {"--optimizer=rmsprop", "--lr=0.1", "--weight_decay=0"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 2) << r->err;
  EXPECT_NE(r->err.find("sgd, adagrad"), std::string::npos) << r->err;
}

// A group's whole-tensor rule is named as what it is: Adafactor's groups
// were once described as Muon's.
TEST(CtlTest, InspectNamesEachGroupsRule) {
  auto cluster = testing::LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string servers = "--servers=" + (*cluster)->server_list();
  std::vector<std::string> init = {
      "init", servers,
      R"(--param_groups={"matrices": {"optimizer": {"type": "Adafactor"}}})"};
  for (const auto& f : Shape()) init.push_back(f);
  auto r = RunBinary("zeroshard-ctl", init, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  r = RunBinary("zeroshard-ctl", {"inspect", servers}, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  EXPECT_NE(r->out.find("matrices Adafactor lr none"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("relative_step true"), std::string::npos) << r->out;
  EXPECT_EQ(r->out.find("Muon"), std::string::npos) << r->out;
  // inspect --tensor names the state as the rule's entry declares it: a
  // matrix's row and column statistics in exp_avg_sq, no first moment
  // without beta1.
  r = RunBinary("zeroshard-ctl", {"inspect", servers, "--tensor=h.0.mlp.c_fc.weight"},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err << r->out;
  for (const char* row : {"exp_avg_sq: exp_avg_sq_row", "exp_avg_sq: exp_avg_sq_col",
                          "updated whole by adafactor",
                          "not used for this tensor: exp_avg"}) {
    EXPECT_NE(r->out.find(row), std::string::npos) << row << "\n" << r->out;
  }
  EXPECT_EQ(r->out.find("exp_avg_sq: exp_avg_sq\n"), std::string::npos) << r->out;
  r = RunBinary("zeroshard-ctl", {"inspect", servers, "--tensor=h.0.mlp.c_fc.weight",
                                  "--state=exp_avg_sq", "--out=" + ::testing::TempDir() + "/x.npy"},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 2) << r->err;
  EXPECT_NE(r->err.find("nothing written"), std::string::npos) << r->err;
}

TEST(CtlTest, LayoutWorksOffline) {
  std::vector<std::string> args = {"layout", "--num_servers=3"};
  for (const auto& f : Shape()) args.push_back(f);
  auto r = RunBinary("zeroshard-ctl", args, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  for (const char* s : {"embedding", "block_0", "block_1", "final", "server",
                        "worker"}) {
    EXPECT_NE(r->out.find(s), std::string::npos) << s << "\n" << r->out;
  }
  args.push_back("--json");
  r = RunBinary("zeroshard-ctl", args, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  nlohmann::json j = nlohmann::json::parse(r->out);
  ASSERT_EQ(j["servers"].size(), 3u);
  ASSERT_EQ(j["workers"].size(), 2u);
  const uint64_t total = j["total_elems"].get<uint64_t>();
  uint64_t prev_end = 0, worker_sum = 0;
  for (const auto& s : j["servers"]) {
    EXPECT_EQ(s["begin"].get<uint64_t>(), prev_end);
    prev_end = s["end"].get<uint64_t>();
  }
  EXPECT_EQ(prev_end, total);
  for (const auto& w : j["workers"]) worker_sum += w["elems"].get<uint64_t>();
  EXPECT_EQ(worker_sum, total);

  // --keep_whole: no server boundary falls inside a kept tensor. Without it,
  // at this shape one does (the control), so the check can fail.
  auto cuts_inside = [](const nlohmann::json& j, bool only_kept) {
    int n = 0;
    for (const auto& s : j["servers"]) {
      const uint64_t c = s["begin"].get<uint64_t>();
      for (const auto& t : j["tensors"]) {
        if (only_kept && !t["keep_whole"].get<bool>()) continue;
        if (t["class"] != "matrices") continue;
        const uint64_t b = t["offset"].get<uint64_t>();
        n += b < c && c < b + t["numel"].get<uint64_t>() ? 1 : 0;
      }
    }
    return n;
  };
  EXPECT_GT(cuts_inside(j, false), 0) << j.dump(2);
  EXPECT_EQ(j["whole_tensors"].get<int>(), 0);
  args.push_back("--keep_whole=matrices");
  r = RunBinary("zeroshard-ctl", args, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  j = nlohmann::json::parse(r->out);
  EXPECT_EQ(cuts_inside(j, true), 0) << j.dump(2);
  EXPECT_EQ(cuts_inside(j, false), 0);
  EXPECT_GT(j["whole_tensors"].get<int>(), 0);
  EXPECT_GE(j["imbalance"].get<double>(), 0.0);
  args.pop_back();
  args.pop_back();  // --json: the table says how many tensors stay whole
  args.push_back("--keep_whole=matrices,norms");
  r = RunBinary("zeroshard-ctl", args, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->out.find("tensors kept whole on one server"), std::string::npos)
      << r->out;
  EXPECT_NE(r->out.find("above the mean share"), std::string::npos) << r->out;
  args.back() = "--keep_whole=matrices,weights";
  r = RunBinary("zeroshard-ctl", args, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->err.find("'weights' is not a parameter class"), std::string::npos)
      << r->err;
}

TEST(CtlTest, BadUsageIsAClearError) {
  auto r = RunBinary("zeroshard-ctl", {"inspect"}, kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->err.find("--servers"), std::string::npos) << r->err;
  r = RunBinary("zeroshard-ctl", {"frobnicate", "--servers=a:1"}, kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->err.find("frobnicate"), std::string::npos) << r->err;
  r = RunBinary("zeroshard-ctl", {"inspect", "--servers=nohostport"}, kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->err.find("nohostport"), std::string::npos) << r->err;
  r = RunBinary("zeroshard-ctl", {"layout", "--heads=3", "--width=64"},
                kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->status.code, 0);
  r = RunBinary("zeroshard-ctl", {"layout", "--no_such_flag=1"}, kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->status.code, 0);
  EXPECT_NE(r->err.find("no_such_flag"), std::string::npos) << r->err;
}

// `zeroshard-ctl config` resolves a DeepSpeed-style file into the file a
// worker reads; the worker refuses an unresolved file and one resolved for
// other counts, each with a message saying what to do.
TEST(CtlTest, ConfigWritesWhatAWorkerReadsAndWorkersCheckIt) {
  const std::string dir = testing::MakeTempDir("ctl-config");
  const std::string resolved = dir + "/resolved.json";
  auto r = RunBinary("zeroshard-ctl",
                     {"config", "--config=examples/gpt-small.json",
                      "--workers=2", "--num_servers=3", "--train_steps=70",
                      "--out=" + resolved},
                     kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  nlohmann::json j = nlohmann::json::parse(testing::ReadFile(resolved));
  EXPECT_EQ(j["zeroshard_resolved_config"].get<int>(), 1);
  EXPECT_EQ(j["config"]["cluster"]["workers"].get<int>(), 2);
  EXPECT_EQ(j["config"]["cluster"]["servers"].get<int>(), 3);
  EXPECT_EQ(j["config"]["cluster"]["steps"].get<int>(), 70);
  // The schedule's "auto" total follows the steps, resolved once here.
  EXPECT_EQ(j["config"]["optimizer"]["total_steps"].get<int>(), 70);

  // Resolved for 2 workers and 3 servers; this worker says 1 and 1.
  r = RunBinary("zeroshard-worker",
                {"--rank=0", "--world_size=1", "--servers=127.0.0.1:1",
                 "--config=" + resolved},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 1);
  EXPECT_NE(r->err.find("was resolved for 2 workers and 3 servers"),
            std::string::npos)
      << r->err;
  // --device and --comm are checked before the worker joins anything.
  const std::string one = dir + "/one.json";
  r = RunBinary("zeroshard-ctl",
                {"config", "--config=examples/gpt-small.json", "--workers=1",
                 "--num_servers=1", "--out=" + one},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--device=gpu", "--device='gpu' is not one of auto, cpu, cuda"},
      {"--device=cuda:999", "--device=cuda"},
      {"--comm=mpi", "--comm=mpi: unknown collectives backend"}};
  for (const auto& [flag, want] : refused) {
    r = RunBinary("zeroshard-worker",
                  {"--rank=0", "--world_size=1", "--servers=127.0.0.1:1",
                   "--config=" + one, flag},
                  kTimeout);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status.code, 1) << flag;
    EXPECT_NE(r->err.find(want), std::string::npos) << flag << ": " << r->err;
  }
  // A DeepSpeed-style file is not what a worker reads.
  r = RunBinary("zeroshard-worker",
                {"--rank=0", "--world_size=1", "--servers=127.0.0.1:1",
                 "--config=examples/gpt-small.json"},
                kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 1);
  EXPECT_NE(r->err.find("zeroshard-ctl config"), std::string::npos) << r->err;

  r = RunBinary("zeroshard-ctl",
                {"config", "--config=examples/gpt-small.json",
                 "--num_servers=2", "--servers=127.0.0.1:1,127.0.0.1:2,"
                                    "127.0.0.1:3"},
                kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->err.find("--num_servers=2 but --servers lists 3"),
            std::string::npos)
      << r->err;
  r = RunBinary("zeroshard-ctl", {"config"}, kTimeout);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 2);
  EXPECT_NE(r->err.find("--config=FILE"), std::string::npos) << r->err;
}

}  // namespace
}  // namespace zeroshard
