// Checkpoints end to end, with real processes (docs/DESIGN.md,
// "Checkpoints"): a run cut at a checkpoint and resumed equals the
// uninterrupted run bit for bit — on the same cluster and on other server
// counts — and within the stated tolerance on another worker count; a
// checkpoint with a missing, truncated or bit-flipped shard file is named
// and never loaded.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_manifest.h"
#include "gtest/gtest.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSteps = 12;
constexpr uint64_t kCut = 6;
const absl::Duration kResumeRunTimeout = absl::Seconds(300);

// 2 servers x 2 workers, a constant learning rate, checkpoints every kCut
// steps into `ckpt`.
nlohmann::json Config(const std::string& ckpt) {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = kSteps;
  cfg["zeroshard"]["checkpoint"] = {
      {"dir", ckpt}, {"every_steps", kCut}, {"keep_last", 3}};
  return cfg;
}

// The uninterrupted run, and a run stopped at kCut whose checkpoints are in
// "cut-ckpt"; shared by the tests below.
class ResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TrainDir("ckpt");
    const std::string full_cfg =
        dir_->WriteConfig("full.json", Config(dir_->path("full-ckpt")));
    full_ = new TrainRun(RunTrain({"--config=" + full_cfg,
                                   "--out=" + dir_->path("full"),
                                   "--save_weights", "--quiet"},
                                  kResumeRunTimeout));
    const std::string cut_cfg =
        dir_->WriteConfig("cut.json", Config(dir_->path("cut-ckpt")));
    cut_ = new TrainRun(RunTrain(
        {"--config=" + cut_cfg, "--out=" + dir_->path("cut"),
         absl::StrCat("--steps=", kCut), "--quiet"},
        kResumeRunTimeout));
  }
  static void TearDownTestSuite() {
    delete full_;
    delete cut_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_TRUE(full_->status.success()) << full_->err;
    ASSERT_TRUE(cut_->status.success()) << cut_->err;
  }

  // A copy of the cut run's checkpoint of kCut, alone in a new directory.
  static std::string CopyOfCut(const std::string& name) {
    const fs::path to = dir_->path(name);
    fs::create_directories(to);
    fs::copy(fs::path(dir_->path("cut-ckpt")) / CheckpointFolderName(kCut),
             to / CheckpointFolderName(kCut), fs::copy_options::recursive);
    return to.string();
  }

  // Resumes from `from` on S servers x N workers; the run's outcome.
  static TrainRun Resume(const std::string& name, const std::string& from,
                         int servers, int workers) {
    const std::string cfg =
        dir_->WriteConfig(name + ".json", Config(dir_->path(name + "-ckpt")));
    return RunTrain({"--config=" + cfg, "--out=" + dir_->path(name),
                     "--resume=" + from, absl::StrCat("--servers=", servers),
                     absl::StrCat("--workers=", workers), "--save_weights",
                     "--quiet"},
                    kResumeRunTimeout);
  }

  static TrainDir* dir_;
  static TrainRun* full_;
  static TrainRun* cut_;
};
TrainDir* ResumeTest::dir_ = nullptr;
TrainRun* ResumeTest::full_ = nullptr;
TrainRun* ResumeTest::cut_ = nullptr;

TEST_F(ResumeTest, CutAndResumedRunEqualsTheUninterruptedOneBitForBit) {
  // The cut run left complete checkpoints of step kCut (the end) only:
  // step 0 is not taken.
  absl::StatusOr<std::vector<uint64_t>> steps =
      ListCheckpoints(dir_->path("cut-ckpt"));
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, std::vector<uint64_t>{kCut});
  TrainRun run = Resume("same", CopyOfCut("same-from"), 2, 2);
  ASSERT_TRUE(run.status.success()) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, absl::StrCat("step ", kCut, " .. ",
                                             kSteps - 1)))
      << run.err;
  WeightDiff d = CompareWeights(ReadWeights(dir_->path("same")),
                                ReadWeights(dir_->path("full")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
  EXPECT_EQ(NotTrained(dir_->path("full"), Config("")), "");
  // The same losses, step by step.
  auto full = ReadMetricsCsv(dir_->path("full") + "/metrics.csv");
  auto resumed = ReadMetricsCsv(dir_->path("same") + "/metrics.csv");
  ASSERT_EQ(full.size(), kSteps);
  ASSERT_EQ(resumed.size(), kSteps - kCut);
  for (uint64_t s = kCut; s < kSteps; ++s) {
    EXPECT_EQ(resumed[s - kCut].at("loss"), full[s].at("loss")) << "step " << s;
  }
}

TEST_F(ResumeTest, ResumesOntoOtherServerCountsBitForBit) {
  const std::string from = CopyOfCut("servers-from");
  for (int servers : {1, 3}) {
    const std::string name = absl::StrCat("s", servers);
    TrainRun run = Resume(name, from, servers, 2);
    ASSERT_TRUE(run.status.success()) << run.err;
    WeightDiff d = CompareWeights(ReadWeights(dir_->path(name)),
                                  ReadWeights(dir_->path("full")));
    EXPECT_TRUE(d.bit_identical) << servers << " servers: max_abs "
                                 << d.max_abs << " in " << d.worst_tensor;
  }
}

TEST_F(ResumeTest, ResumesOntoAnotherWorkerCountWithinTolerance) {
  // One worker pads units differently (partition_count 1 instead of 2): the
  // restore maps every element by tensor. Summation order may change, so
  // the tolerance of the 2x2-vs-1x1 test applies.
  TrainRun run = Resume("w1", CopyOfCut("w1-from"), 2, 1);
  ASSERT_TRUE(run.status.success()) << run.err;
  const nlohmann::json cfg = Config("");
  const auto a = ReadWeights(dir_->path("w1"));
  const auto b = ReadWeights(dir_->path("full"));
  EXPECT_LT(RelativeUpdateDiff(a, b, InitialWeights(cfg)), 1e-3);
  EXPECT_LT(CompareWeights(a, b).max_abs,
            0.05 * cfg["optimizer"]["params"]["lr"].get<double>() * kSteps);
}

// Rules for whole tensors: Muon for the matrices group (its momentum in
// the servers' exp_avg slot), Adafactor with a first moment for the norms
// and biases (its moments in exp_avg and exp_avg_sq), AdamW for the
// embeddings; those tensors kept whole, so the servers' boundaries differ
// from the AdamW run's. Cut at a checkpoint and resumed on 3 servers (the
// boundaries move again), the run ends on the uninterrupted run's bits.
TEST(TensorRuleResumeTest, CutAndResumedOnThreeServersEqualsTheUninterruptedRun) {
  TrainDir dir("rule_ckpt");
  auto config = [&](const std::string& ckpt) {
    nlohmann::json cfg = Config(ckpt);
    cfg["zeroshard"]["steps"] = 8;
    cfg["zeroshard"]["checkpoint"]["every_steps"] = 4;
    const nlohmann::json adafactor = {
        {"type", "Adafactor"},
        {"params", {{"beta1", 0.9}, {"weight_decay", 0.01}}}};
    cfg["zeroshard"]["param_groups"] = {
        {"matrices",
         {{"optimizer",
           {{"type", "Muon"}, {"params", {{"lr", 0.02}, {"weight_decay", 0.01}}}}}}},
        {"norms", {{"optimizer", adafactor}}},
        {"biases", {{"optimizer", adafactor}}}};
    return cfg;
  };
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--config=" + dir.WriteConfig(name + ".json",
                                      config(dir.path(name + "-ckpt"))),
        "--out=" + dir.path(name), "--save_weights", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunTrain(args, kResumeRunTimeout);
  };
  TrainRun full = run("full", {});
  ASSERT_TRUE(full.status.success()) << full.err;
  TrainRun cut = run("cut", {"--steps=4"});
  ASSERT_TRUE(cut.status.success()) << cut.err;
  TrainRun resumed = run("resumed", {"--resume=" + dir.path("cut-ckpt"),
                                     "--servers=3", "--workers=2"});
  ASSERT_TRUE(resumed.status.success()) << resumed.err;
  const auto a = ReadWeights(dir.path("resumed"));
  ASSERT_FALSE(a.empty());
  WeightDiff d = CompareWeights(a, ReadWeights(dir.path("full")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
  // Not AdamW's run: the rules moved their tensors.
  TrainRun adam = RunTrain(
      {"--config=" + dir.WriteConfig("adam.json", Config(dir.path("adam-ckpt"))),
       "--out=" + dir.path("adam"), "--steps=8", "--save_weights", "--quiet"},
      kResumeRunTimeout);
  ASSERT_TRUE(adam.status.success()) << adam.err;
  EXPECT_FALSE(CompareWeights(a, ReadWeights(dir.path("adam"))).bit_identical);
}

// 8-bit AdamW state (optimizer.type "AdamW8bit"): a run cut at a
// checkpoint and resumed on the same cluster ends on the uninterrupted
// run's bits (the files hold the codes and scales themselves); resumed on
// 3 servers, the blocks follow the new ranges, so the state is quantized
// once more and the run stays within the cross-layout tolerance. Not the
// FP32-state run.
TEST(EightBitResumeTest, CutAndResumedRunsEqualTheUninterruptedOne) {
  TrainDir dir("q8_ckpt");
  auto config = [&](const std::string& ckpt, bool eight_bit) {
    nlohmann::json cfg = Config(ckpt);
    cfg["zeroshard"]["steps"] = 8;
    cfg["zeroshard"]["checkpoint"]["every_steps"] = 4;
    if (eight_bit) cfg["optimizer"]["type"] = "AdamW8bit";
    return cfg;
  };
  auto run = [&](const std::string& name, bool eight_bit, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--config=" + dir.WriteConfig(name + ".json",
                                      config(dir.path(name + "-ckpt"), eight_bit)),
        "--out=" + dir.path(name), "--save_weights", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunTrain(args, kResumeRunTimeout);
  };
  TrainRun full = run("full", true, {});
  ASSERT_TRUE(full.status.success()) << full.err;
  TrainRun cut = run("cut", true, {"--steps=4"});
  ASSERT_TRUE(cut.status.success()) << cut.err;
  TrainRun same = run("same", true, {"--resume=" + dir.path("cut-ckpt")});
  ASSERT_TRUE(same.status.success()) << same.err;
  const auto want = ReadWeights(dir.path("full"));
  ASSERT_FALSE(want.empty());
  WeightDiff d = CompareWeights(ReadWeights(dir.path("same")), want);
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in " << d.worst_tensor;
  TrainRun three = run("three", true, {"--resume=" + dir.path("cut-ckpt"), "--servers=3"});
  ASSERT_TRUE(three.status.success()) << three.err;
  // The restored weights are exact: the first step's loss is the full
  // run's; the state, quantized again in the new blocks, moves the next
  // steps' losses a little.
  const auto full_loss = ReadMetricsCsv(dir.path("full") + "/metrics.csv");
  const auto moved_loss = ReadMetricsCsv(dir.path("three") + "/metrics.csv");
  ASSERT_EQ(full_loss.size(), 8u);
  ASSERT_EQ(moved_loss.size(), 4u);
  EXPECT_EQ(moved_loss[0].at("loss"), full_loss[4].at("loss"));
  for (size_t s = 1; s < 4; ++s) {
    const double a = std::stod(moved_loss[s].at("loss"));
    const double b = std::stod(full_loss[4 + s].at("loss"));
    EXPECT_NEAR(a, b, 2e-3 * b) << "step " << 4 + s;  // 1e-4 measured
  }
  TrainRun fp32 = run("fp32", false, {});
  ASSERT_TRUE(fp32.status.success()) << fp32.err;
  EXPECT_FALSE(CompareWeights(want, ReadWeights(dir.path("fp32"))).bit_identical);
}

TEST_F(ResumeTest, DamagedShardFilesAreNamedAndNeverLoaded) {
  struct Damage {
    const char* name;
    void (*apply)(const fs::path& file);
    const char* says;
  };
  const Damage damages[] = {
      {"flip",
       [](const fs::path& f) {
         std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
         io.seekg(static_cast<std::streamoff>(fs::file_size(f) / 2));
         char c = 0;
         io.read(&c, 1);
         c ^= 0x10;
         io.seekp(static_cast<std::streamoff>(fs::file_size(f) / 2));
         io.write(&c, 1);
       },
       "checksum"},
      {"truncate",
       [](const fs::path& f) { fs::resize_file(f, fs::file_size(f) - 100); },
       ""},
      {"missing", [](const fs::path& f) { fs::remove(f); }, ""},
  };
  for (const Damage& d : damages) {
    const std::string from = CopyOfCut(absl::StrCat("damaged-", d.name));
    const fs::path file =
        fs::path(from) / CheckpointFolderName(kCut) / ShardFileName(1, 2);
    d.apply(file);
    TrainRun run = Resume(absl::StrCat("damaged-run-", d.name), from, 2, 2);
    EXPECT_FALSE(run.status.success()) << d.name;
    EXPECT_TRUE(absl::StrContains(run.err, file.string())) << d.name << ": " << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, d.says)) << d.name << ": " << run.err;
    // Nothing trained: the run stopped before its first step.
    EXPECT_FALSE(fs::exists(dir_->path(absl::StrCat("damaged-run-", d.name)) +
                            "/weights.f32"));
  }
}

}  // namespace
}  // namespace zeroshard::testing
