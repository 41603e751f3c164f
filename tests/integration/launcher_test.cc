// zeroshard-train's rough edges, each through the command a user types: a
// second run on a live run's --out, where the servers are and how
// zeroshard-ctl reaches them, extending a run by --resume, a damaged newest
// checkpoint, counts out of range, an --out that holds an earlier run.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/support/test_files.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

// zeroshard-train --config=examples/gpt-small.json --steps=400 --out=X --quiet
// runs; the same command with --steps=5 on the same --out is refused, naming
// the first run's pid, and the first trains on, its credentials untouched.
TEST(LauncherTest, ASecondRunOnALiveRunsOutIsRefused) {
  TrainDir dir("launcher_lock");
  const std::string out = dir.path("x");
  SubprocessOptions o;
  o.argv = {BinDir() + "/zeroshard-train", "--config=examples/gpt-small.json",
            "--steps=400", "--out=" + out, "--quiet"};
  o.stdout_mode = SubprocessOptions::Output::kDiscard;
  o.stderr_mode = SubprocessOptions::Output::kFile;
  o.stderr_path = dir.path("first.err");
  auto first = Subprocess::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(WaitForStep(out, 1, **first, absl::Seconds(120)).ok)
      << ReadFile(dir.path("first.err"));
  const std::string tokens = ReadFile(out + "/credentials/admin.token");

  // Where the servers are is said at start, with a command that works as
  // pasted; --cluster=OUT finds servers and credentials; without
  // credentials the refusal names where they are.
  const std::string said = ReadFile(dir.path("first.err"));
  const size_t at = said.find("zeroshard-ctl inspect --servers=");
  ASSERT_NE(at, std::string::npos) << said;
  const std::string pasted = said.substr(at, said.find('\n', at) - at);
  const std::string servers_flag =
      pasted.substr(pasted.find("--servers="),
                    pasted.find(' ', pasted.find("--servers=")) -
                        pasted.find("--servers="));
  EXPECT_TRUE(absl::StrContains(pasted, " --credentials=")) << pasted;
  auto by_cluster = RunBinary("zeroshard-ctl",
                              {"inspect", "--cluster=" + out}, absl::Seconds(30));
  ASSERT_TRUE(by_cluster.ok()) << by_cluster.status();
  EXPECT_TRUE(by_cluster->status.success()) << by_cluster->err;
  // --cluster=OUT needs nothing the run's directory holds: layout is the
  // run's (2 servers, 2 workers), sample needs no --config.
  auto layout = RunBinary("zeroshard-ctl", {"layout", "--cluster=" + out, "--json"},
                          absl::Seconds(30));
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(layout->status.success()) << layout->err;
  const nlohmann::json lj = nlohmann::json::parse(layout->out);
  EXPECT_EQ(lj["num_workers"], 2) << layout->out;
  EXPECT_EQ(lj["num_servers"], 2) << layout->out;
  auto sampled = RunBinary("zeroshard-ctl",
                           {"sample", "--cluster=" + out, "--max_new_tokens=4",
                            "--prompt=ids:1,2"},
                           absl::Seconds(60));
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_TRUE(sampled->status.success()) << sampled->err;
  EXPECT_TRUE(absl::StrContains(by_cluster->out,
                       servers_flag.substr(std::string("--servers=").size(),
                                           servers_flag.find(',') -
                                               std::string("--servers=").size())))
      << by_cluster->out << "\n" << servers_flag;
  auto bare = RunBinary("zeroshard-ctl", {"inspect", servers_flag},
                        absl::Seconds(30));
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->status.success());
  EXPECT_TRUE(absl::StrContains(bare->out + bare->err, "UNAUTHENTICATED"))
      << bare->out << bare->err;
  EXPECT_TRUE(absl::StrContains(bare->out + bare->err, "<out>/credentials"))
      << bare->out << bare->err;

  TrainRun second = RunTrain({"--config=examples/gpt-small.json", "--steps=5",
                              "--out=" + out, "--quiet"},
                             absl::Seconds(60));
  EXPECT_TRUE(second.status.exited);
  EXPECT_EQ(second.status.code, 2) << second.err;  // a bad --out for this run
  EXPECT_TRUE(absl::StrContains(second.err,
                       absl::StrCat("--out=", out,
                                    " is in use by a running zeroshard-train "
                                    "(pid ",
                                    (*first)->pid(), ")")))
      << second.err;
  EXPECT_EQ(ReadFile(out + "/credentials/admin.token"), tokens);

  // The first run goes on: more steps land after the refusal.
  const size_t before = StepsDone(out);
  EXPECT_TRUE(WaitForStep(out, before + 2, **first, absl::Seconds(60)).ok)
      << ReadFile(dir.path("first.err"));
  const ExitStatus stopped = (*first)->Stop(absl::Seconds(20));
  EXPECT_FALSE(absl::StrContains(ReadFile(dir.path("first.err")), "UNAUTHENTICATED"))
      << ReadFile(dir.path("first.err"));
  EXPECT_TRUE(stopped.exited && stopped.code == 130) << stopped.ToString();

  // With the first gone the directory is free again, and a run there
  // removes every output of the earlier run, also those it does not write
  // itself (no sample here; a JSON Lines file of another run), and says so.
  ASSERT_TRUE(testing::WriteFile(out + "/sample.txt", "an earlier sample"));
  ASSERT_TRUE(testing::WriteFile(out + "/metrics.jsonl", "{\"step\":0}\n"));
  TrainRun third = RunTrain({"--config=examples/gpt-small.json", "--steps=2",
                             "--servers=1", "--workers=1", "--out=" + out,
                             "--quiet", "--sample=false"},
                            absl::Seconds(120));
  ASSERT_TRUE(third.status.success()) << third.err;
  EXPECT_TRUE(absl::StrContains(third.err, absl::StrCat("--out=", out,
                                               " held an earlier run's ")))
      << third.err;
  EXPECT_TRUE(absl::StrContains(third.err, "metrics.jsonl")) << third.err;
  EXPECT_TRUE(absl::StrContains(third.err, "removed, so that only this run's "
                                           "outputs are there"))
      << third.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/sample.txt"));
  EXPECT_FALSE(std::filesystem::exists(out + "/metrics.jsonl"));
  EXPECT_TRUE(std::filesystem::exists(out + "/metrics.csv"));
}

// A run of 20 steps, checkpointed every 10, is extended to 50 by --resume
// into the same --out on one server and one worker: the terminal says what
// is resumed and that the schedule ("total_num_steps": "auto") now ends at
// 50; the config's 30-step warmup, shortened to fit the first run, is no
// reason to refuse; the steps after 20 train, and metrics.csv holds the
// whole history. Resuming with another optimizer is refused before anything
// starts; resuming again to 50 has nothing left to do and says so.
TEST(LauncherTest, ARunIsExtendedByResume) {
  TrainDir dir("launcher_resume");
  nlohmann::json cfg = nlohmann::json::parse(ReadFile("examples/gpt-small.json"));
  const std::string ck = dir.path("ck");
  cfg["zeroshard"]["checkpoint"] = {{"dir", ck}, {"every_steps", 10}};
  // The demo's config with a smaller model: what is tested is the launcher
  // (its "auto" schedule, the resume's lines, the damaged checkpoints), and
  // the demo's model took 100 s of the sanitizer run's 50 steps.
  cfg["zeroshard"]["model"] = {{"layers", 2}, {"heads", 2}, {"width", 64},
                               {"vocab", 256}, {"context", 32}};
  const std::string config = "--config=" + dir.WriteConfig("a.json", cfg);
  TrainRun first = RunTrain({config, "--steps=20", "--out=" + dir.path("a"),
                             "--quiet", "--sample=false"},
                            absl::Seconds(300));
  ASSERT_TRUE(first.status.success()) << first.err;

  TrainRun more = RunTrain({config, "--resume=" + ck, "--servers=1",
                            "--workers=1", "--steps=50",
                            "--out=" + dir.path("a"), "--quiet",
                            "--sample=false"},
                           absl::Seconds(300));
  ASSERT_TRUE(more.status.success()) << more.err;
  EXPECT_TRUE(absl::StrContains(more.err, absl::StrCat(
                                     "resuming from step 20 of ", ck,
                                     " (written by 2 servers x 2 workers; "
                                     "this run: 1 server x 1 worker), "
                                     "training to step 50")))
      << more.err;
  EXPECT_TRUE(absl::StrContains(more.err,
                       "the learning-rate schedule now ends at step 50 (the "
                       "checkpoint's run ended it at 20); the steps after "
                       "step 20 follow this run's schedule"))
      << more.err;
  EXPECT_TRUE(absl::StrContains(more.err, "(its metrics history goes on)"))
      << more.err;
  const auto rows = ReadMetricsCsv(dir.path("a/metrics.csv"));
  // Steps 0..19 of the first run, then 20..49, as metrics.csv counts them.
  ASSERT_EQ(rows.size(), 50u) << more.err;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("step"), std::to_string(i));
  }

  // --resume=DIR/step-N resumes that checkpoint, not the newest (50); its
  // own checkpoints go elsewhere, leaving ck as the rest of the test wants.
  nlohmann::json elsewhere = cfg;
  elsewhere["zeroshard"]["checkpoint"]["dir"] = dir.path("ck2");
  const std::string config2 = "--config=" + dir.WriteConfig("b.json", elsewhere);
  TrainRun older = RunTrain({config2, "--resume=" + ck + "/step-00000000000000000040/",
                             "--servers=1", "--workers=1", "--steps=42",
                             "--out=" + dir.path("older"), "--quiet",
                             "--sample=false"},
                            absl::Seconds(300));
  ASSERT_TRUE(older.status.success()) << older.err;
  EXPECT_TRUE(absl::StrContains(older.err, absl::StrCat(
                                      "resuming from step 40 of ", ck)))
      << older.err;
  const auto older_rows = ReadMetricsCsv(dir.path("older/metrics.csv"));
  ASSERT_EQ(older_rows.size(), 2u) << older.err;
  EXPECT_EQ(older_rows.front().at("step"), "40");
  TrainRun missing = RunTrain({config2, "--resume=" + ck + "/step-00000000000000000015",
                               "--steps=20", "--out=" + dir.path("m"), "--quiet"},
                              absl::Seconds(60));
  EXPECT_TRUE(missing.status.exited && missing.status.code == 2) << missing.err;
  EXPECT_TRUE(absl::StrContains(missing.err, "holds no complete checkpoint at step 15"))
      << missing.err;

  // Another optimizer (the lr, the betas) is refused before anything
  // starts, in the config's words, from what the manifest recorded.
  nlohmann::json other = cfg;
  other["optimizer"]["params"]["lr"] = 0.002;
  other["optimizer"]["params"]["betas"] = {0.9, 0.99};
  TrainRun changed = RunTrain({"--config=" + dir.WriteConfig("o.json", other),
                               "--resume=" + ck, "--steps=60",
                               "--out=" + dir.path("o"), "--quiet"},
                              absl::Seconds(60));
  EXPECT_TRUE(changed.status.exited && changed.status.code == 2) << changed.err;
  EXPECT_TRUE(absl::StrContains(
      changed.err, "step 50 was trained with another optimizer configuration "
                   "(checkpoint -> now: optimizer.params.lr: 0.001 -> 0.002; "
                   "optimizer.params.betas[1]: 0.95 -> 0.99; "))
      << changed.err;
  // The schedule's length is not the optimizer's, and is not named.
  EXPECT_FALSE(absl::StrContains(changed.err, "total_steps")) << changed.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("o/logs"))) << changed.err;

  TrainRun again = RunTrain({config, "--resume=" + ck, "--steps=50",
                             "--out=" + dir.path("c"), "--quiet"},
                            absl::Seconds(60));
  EXPECT_TRUE(again.status.exited && again.status.code == 2) << again.err;
  EXPECT_TRUE(absl::StrContains(again.err,
                       absl::StrCat("--resume=", ck,
                                    ": its newest checkpoint is at step 50 "
                                    "and this run trains to step 50: nothing "
                                    "is left to do")))
      << again.err;

  // The newest checkpoint damaged (a shard file cut short): the resume is
  // refused naming the newest intact one, and `zeroshard-ctl list` hashes
  // every file, so it tells damaged from intact (a flipped byte inside a
  // file too) where it used to call both complete.
  const std::string step50 = ck + "/step-00000000000000000050";
  const std::string step40 = ck + "/step-00000000000000000040";
  ASSERT_TRUE(std::filesystem::exists(step50 + "/shard-0-of-1.bin"));
  std::filesystem::resize_file(
      step50 + "/shard-0-of-1.bin",
      std::filesystem::file_size(step50 + "/shard-0-of-1.bin") - 1);
  TrainRun damaged = RunTrain({config, "--resume=" + ck, "--steps=60",
                               "--out=" + dir.path("d"), "--quiet"},
                              absl::Seconds(60));
  EXPECT_TRUE(damaged.status.exited && damaged.status.code == 1) << damaged.err;
  EXPECT_TRUE(absl::StrContains(damaged.err, "the newest checkpoint, step 50, is damaged"))
      << damaged.err;
  EXPECT_TRUE(absl::StrContains(damaged.err, "the newest intact one is step 40: move " +
                                        step50 + " aside"))
      << damaged.err;
  auto list = RunBinary("zeroshard-ctl", {"list", "--dir=" + ck}, absl::Seconds(30));
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->status.code, 1) << list->out << list->err;
  EXPECT_TRUE(absl::StrContains(list->out, "damaged: step 50: " + step50 + "/shard-0-of-1.bin"))
      << list->out;
  EXPECT_TRUE(absl::StrContains(list->out, "newest intact: step 40")) << list->out;
  {
    std::fstream f(step40 + "/shard-0-of-1.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 1);
    f.seekp(100);
    f.write(&c, 1);
  }
  list = RunBinary("zeroshard-ctl", {"list", "--dir=" + ck}, absl::Seconds(30));
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(absl::StrContains(list->out, "damaged: step 40: ")) << list->out;
  EXPECT_TRUE(absl::StrContains(list->out, "contents differ")) << list->out;
  EXPECT_TRUE(absl::StrContains(list->out, "no intact checkpoint")) << list->out;
}

// --steps=-1, --steps=0 and --servers=-1 used to train the config's 300
// steps; each is refused before anything starts, naming the flag.
// examples/llama-small.json's Llama (a smaller one) through zeroshard-train
// as GPT-2 runs: cut by a checkpoint and resumed on another S x N, it ends
// bit for bit where the uninterrupted run ends; its weights go out under
// Hugging Face's Llama names; the closing sample comes from it.
TEST(LauncherTest, ALlamaTrainsResumesAndWritesHuggingFaceNames) {
  TrainDir dir("launcher_llama");
  nlohmann::json cfg = nlohmann::json::parse(ReadFile("examples/llama-small.json"));
  cfg["zeroshard"]["model"] = {{"arch", "llama"}, {"layers", 2},   {"heads", 4},
                               {"kv_heads", 2},   {"width", 64},   {"mlp_width", 96},
                               {"vocab", 256},    {"context", 32}};
  // One schedule for both runs: the cut run's is the whole run's.
  cfg["scheduler"]["params"]["warmup_num_steps"] = 2;
  cfg["scheduler"]["params"]["total_num_steps"] = 12;
  const std::string whole_config = "--config=" + dir.WriteConfig("w.json", cfg);
  cfg["zeroshard"]["checkpoint"] = {{"dir", dir.path("ck")}, {"every_steps", 6}};
  const std::string config = "--config=" + dir.WriteConfig("l.json", cfg);
  TrainRun whole = RunTrain({whole_config, "--steps=12", "--out=" + dir.path("whole"),
                             "--quiet", "--save_weights", "--format=safetensors"},
                            absl::Seconds(300));
  ASSERT_TRUE(whole.status.success()) << whole.err;
  EXPECT_FALSE(ReadFile(dir.path("whole/sample.txt")).empty());
  ASSERT_EQ(ReadMetricsCsv(dir.path("whole/metrics.csv")).size(), 12u);
  const std::string names = ReadFile(dir.path("whole/weights.safetensors")).substr(0, 4096);
  for (const char* name : {"model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
                           "model.layers.0.mlp.gate_proj.weight", "lm_head.weight"}) {
    EXPECT_TRUE(absl::StrContains(names, name)) << name;
  }
  TrainRun cut = RunTrain({config, "--steps=6", "--out=" + dir.path("cut"), "--quiet",
                           "--sample=false"},
                          absl::Seconds(300));
  ASSERT_TRUE(cut.status.success()) << cut.err;
  TrainRun resumed = RunTrain({config, "--resume=" + dir.path("ck"), "--servers=1",
                               "--workers=2", "--steps=12", "--out=" + dir.path("cut"),
                               "--quiet", "--sample=false", "--save_weights"},
                              absl::Seconds(300));
  ASSERT_TRUE(resumed.status.success()) << resumed.err;
  const WeightDiff d = CompareWeights(ReadWeights(dir.path("cut")), ReadWeights(dir.path("whole")));
  EXPECT_TRUE(d.bit_identical) << d.worst_tensor << " " << d.max_abs;
}

// A Hugging Face Llama checkpoint (tests/fixtures/make_llama_golden.py
// writes it in HF's names and layout) through --init_from: on a corpus of
// one byte every window is the same batch, so the first step's loss is
// torch's on those weights and that batch (FP32, within 1e-5).
TEST(LauncherTest, AHuggingFaceLlamaLoadsWithInitFromAsTorchsWeights) {
  TrainDir dir("launcher_llama_init");
  const nlohmann::json golden =
      nlohmann::json::parse(ReadFile("tests/fixtures/llama_init_golden.json"));
  const std::string corpus = dir.path("a.txt");
  {
    std::ofstream out(corpus);
    out << std::string(8192, static_cast<char>(golden["token"].get<int>()));
  }
  nlohmann::json cfg = nlohmann::json::parse(ReadFile("examples/llama-small.json"));
  cfg.erase("bf16");
  cfg["train_batch_size"] = golden["batch"];
  cfg["train_micro_batch_size_per_gpu"] = golden["batch"];
  cfg["gradient_accumulation_steps"] = 1;
  nlohmann::json& z = cfg["zeroshard"];
  z["servers"] = 1;
  z["workers"] = 1;
  z["model"] = {{"arch", "llama"},          {"layers", golden["layers"]},
                {"heads", golden["heads"]}, {"kv_heads", golden["kv_heads"]},
                {"width", golden["width"]}, {"mlp_width", golden["mlp_width"]},
                {"vocab", golden["vocab"]}, {"context", golden["context"]}};
  z["data"] = {{"paths", {corpus}}, {"format", "bytes"}, {"validation_fraction", 0}};
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg), "--steps=1",
                           "--out=" + dir.path("out"), "--quiet", "--sample=false",
                           "--init_from=tests/fixtures/llama_init_golden.safetensors"},
                          absl::Seconds(300));
  ASSERT_TRUE(run.status.success()) << run.err;
  const auto rows = ReadMetricsCsv(dir.path("out/metrics.csv"));
  ASSERT_EQ(rows.size(), 1u);
  const double want = golden["loss"];
  EXPECT_NEAR(std::stod(rows[0].at("loss")), want, 1e-5 * want) << run.err;
}

TEST(LauncherTest, CountsOutOfRangeAreRefusedNamingTheFlag) {
  TrainDir dir("launcher_range");
  struct Case {
    std::string flag, message;
  };
  const Case cases[] = {
      {"--steps=-1", "--steps=-1: want a step count, from 1 to "},
      {"--steps=0", "--steps=0: want a step count, from 1 to "},
      {"--servers=-1", "--servers=-1: want a server count, from 1 to 4096"},
      {"--workers=0", "--workers=0: want a worker count, from 1 to 4096"},
      {"--max_restarts=-2", "--max_restarts=-2: want a restart count"},
  };
  for (const Case& c : cases) {
    TrainRun run = RunTrain({"--config=examples/gpt-small.json", c.flag,
                             "--out=" + dir.path("out"), "--quiet"},
                            absl::Seconds(30));
    EXPECT_TRUE(run.status.exited && run.status.code == 2)
        << c.flag << ": " << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, c.message)) << c.flag << ": " << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, "leave it out for the config's")) << run.err;
  }
  // Refused before anything started: not even the output directory.
  EXPECT_FALSE(std::filesystem::exists(dir.path("out")));
}

// A placement this machine cannot give is refused before any server starts,
// in the config's words (the server would have named --cuda_device=0, a
// flag the user never gave).
TEST(LauncherTest, APlacementWithoutAGpuIsRefusedBeforeAnyServerStarts) {
  if (std::filesystem::exists("/dev/nvidia0")) {
    GTEST_SKIP() << "this machine has a GPU: pinned placement is possible";
  }
  TrainDir dir("launcher_placement");
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["placement"] = "pinned";
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + dir.path("out"), "--quiet"},
                          absl::Seconds(30));
  EXPECT_TRUE(run.status.exited && run.status.code == 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "config key \"zeroshard.placement\" is "
                                         "\"pinned\""))
      << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "--cuda_device")) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("out") + "/logs"));
}

}  // namespace
}  // namespace zeroshard::testing
