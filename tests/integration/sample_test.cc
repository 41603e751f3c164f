// Text out: zeroshard-train's closing sample and `zeroshard-ctl sample`,
// as processes against real servers (127.0.0.1, port 0). The trainer trains
// 3 steps of a tiny byte model on servers the test started, prints a
// sample and leaves the servers running; ctl then samples the same weights
// with the same options and must print the same text, through the byte
// kind, the --config path and a hand-made GPT-2 vocabulary whose tokens are
// the 256 bytes (so its text is the byte kind's). Bad inputs are clear
// errors naming what is wrong.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt2_tokenizer.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(300);

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

nlohmann::json SampleConfigJson() {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["sample"] = {{"prompt", "The "}, {"max_new_tokens", 24},
                                {"temperature", 0.8}, {"top_k", 40}, {"seed", 5}};
  return cfg;
}

class SampleTest : public ::testing::Test {
 protected:
  absl::StatusOr<CommandResult> Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"sample", "--servers=" + cluster_->server_list()});
    return RunBinary("zeroshard-ctl", args, kTimeout);
  }
  // Trains 3 steps on the test's servers (run_, out_, config_).
  void Train(const nlohmann::json& cfg) {
    out_ = dir_.path("out");
    config_ = dir_.WriteConfig("c.json", cfg);
    run_ = RunTrain({"--config=" + config_, "--out=" + out_, "--quiet",
                     "--server_addresses=" + cluster_->server_list()},
                    kTimeout);
    ASSERT_TRUE(run_.status.success()) << run_.status.ToString() << "\n" << run_.err;
  }
  void SetUp() override {
    auto cluster = LocalCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  TrainDir dir_{"sample"};
  std::unique_ptr<LocalCluster> cluster_;
  std::string out_, config_;
  TrainRun run_;
};

TEST_F(SampleTest, TrainerPrintsASampleAndCtlSamplesTheSameFromLiveServers) {
  ASSERT_NO_FATAL_FAILURE(Train(SampleConfigJson()));
  // The trainer's sample: a header, then the text, also in sample.txt.
  const std::string header =
      "sample at step 3 (bytes prompt \"The \", 24 new tokens, temperature 0.8, "
      "top_k 40, seed 5";
  ASSERT_NE(run_.err.find(header), std::string::npos) << run_.err;
  std::string text = Slurp(out_ + "/sample.txt");
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  text.pop_back();
  EXPECT_EQ(text.rfind("The ", 0), 0u) << text;
  EXPECT_GE(text.size(), 4u + 24u) << text;  // escapes only lengthen it
  EXPECT_NE(run_.err.find(text), std::string::npos) << run_.err;

  // ctl on the live servers, the same options on the command line.
  const std::vector<std::string> same = {"--heads=4", "--prompt=The ",
                                         "--max_new_tokens=24", "--temperature=0.8",
                                         "--top_k=40", "--seed=5"};
  std::vector<std::string> json_args = same;
  json_args.push_back("--json");
  auto r = Ctl(json_args);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
  const nlohmann::json j = nlohmann::json::parse(r->out);
  EXPECT_EQ(j.at("step").get<uint64_t>(), 3u);
  EXPECT_EQ(j.at("kind").get<std::string>(), "bytes");
  EXPECT_EQ(j.at("prompt_ids").get<std::vector<int>>(), (std::vector<int>{'T', 'h', 'e', ' '}));
  const std::vector<int> new_ids = j.at("new_ids").get<std::vector<int>>();
  EXPECT_EQ(new_ids.size(), 24u);
  EXPECT_EQ(j.at("text").get<std::string>(), text);
  EXPECT_NE(r->err.find("sample: step 3, bytes prompt of 4 tokens, 24 new tokens"),
            std::string::npos) << r->err;

  // Plain output is the text; --config supplies heads and zeroshard.sample.
  auto plain = Ctl({"--config=" + config_});
  ASSERT_TRUE(plain.ok() && plain->status.success()) << (plain.ok() ? plain->err : "");
  EXPECT_EQ(plain->out, text + "\n");

  // A GPT-2 vocabulary whose tokens are the 256 bytes (no merges): the
  // tokenizer path gives the byte kind's ids and text.
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[Gpt2ByteToUnicode()[b]] = b;
  const std::string vocab_path = dir_.WriteText("vocab.json", vocab.dump());
  const std::string merges_path = dir_.WriteText("merges.txt", "#version: 0.2\n");
  std::vector<std::string> bpe_args = json_args;
  bpe_args.push_back("--vocab_file=" + vocab_path);
  bpe_args.push_back("--merges_file=" + merges_path);
  auto bpe = Ctl(bpe_args);
  ASSERT_TRUE(bpe.ok() && bpe->status.success()) << (bpe.ok() ? bpe->err : "");
  const nlohmann::json jb = nlohmann::json::parse(bpe->out);
  EXPECT_EQ(jb.at("kind").get<std::string>(), "gpt2");
  EXPECT_EQ(jb.at("new_ids").get<std::vector<int>>(), new_ids);
  EXPECT_EQ(jb.at("text").get<std::string>(), text);

  // Greedy twice: the same tokens; another seed changes a sampled run.
  auto g1 = Ctl({"--heads=4", "--temperature=0", "--max_new_tokens=8", "--json"});
  auto g2 = Ctl({"--heads=4", "--temperature=0", "--max_new_tokens=8", "--json",
                 "--seed=99"});
  ASSERT_TRUE(g1.ok() && g2.ok() && g1->status.success() && g2->status.success());
  const nlohmann::json j1 = nlohmann::json::parse(g1->out);
  EXPECT_EQ(j1.at("new_ids").get<std::vector<int>>(),
            nlohmann::json::parse(g2->out).at("new_ids").get<std::vector<int>>());
  EXPECT_EQ(j1.at("prompt_ids").get<std::vector<int>>(),
            (std::vector<int>{'T', 'h', 'e'}));  // the default prompt
}

TEST_F(SampleTest, BadInputsAreClearErrors) {
  ASSERT_NO_FATAL_FAILURE(Train(SampleConfigJson()));
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--heads=4", "--prompt=ids:65,300"},
       "prompt token 300 is not below the model's vocab_size 256"},
      {{"--heads=4", "--prompt="}, "the prompt is empty"},
      {{"--heads=4", "--prompt=ids:"}, "lists no token ids"},
      {{"--heads=4", "--vocab_file=/nonexistent/vocab.json",
        "--merges_file=/nonexistent/merges.txt"},
       "/nonexistent/vocab.json"},
      {{"--heads=4", "--vocab_file=/nonexistent/vocab.json"}, "needs both files"},
      {{"--prompt=x"}, "give --heads=H or --config=FILE"},
      {{"--heads=5"}, "--heads=5"},
      {{"--heads=4", "--temperature=-1"}, "temperature"},
  };
  for (const Case& c : cases) {
    auto r = Ctl(c.args);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status.code, 2) << c.needle << "\n" << r->err;
    EXPECT_NE(r->err.find(c.needle), std::string::npos) << r->err;
  }
  // The trainer checks its sample settings before anything starts.
  nlohmann::json bad = SampleConfigJson();
  bad["zeroshard"]["sample"]["vocab"] = "/nonexistent/vocab.json";
  bad["zeroshard"]["sample"]["merges"] = "/nonexistent/merges.txt";
  TrainRun missing = RunTrain({"--config=" + dir_.WriteConfig("bad.json", bad),
                               "--out=" + dir_.path("bad"), "--quiet",
                               "--server_addresses=" + cluster_->server_list()},
                              kTimeout);
  EXPECT_EQ(missing.status.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("zeroshard.sample"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("/nonexistent/vocab.json"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::ifstream(dir_.path("bad") + "/metrics.csv").good());
}

TEST_F(SampleTest, SampleCanBeTurnedOff) {
  nlohmann::json cfg = SampleConfigJson();
  cfg["zeroshard"]["sample"]["enabled"] = false;
  ASSERT_NO_FATAL_FAILURE(Train(cfg));
  EXPECT_EQ(run_.err.find("sample at step"), std::string::npos) << run_.err;
  EXPECT_FALSE(std::ifstream(out_ + "/sample.txt").good());
  TrainRun flag = RunTrain({"--config=" + dir_.WriteConfig("on.json", SampleConfigJson()),
                            "--out=" + dir_.path("flag"), "--quiet", "--sample=false",
                            "--steps=4", "--server_addresses=" + cluster_->server_list()},
                           kTimeout);
  ASSERT_TRUE(flag.status.success()) << flag.err;
  EXPECT_EQ(flag.err.find("sample at step"), std::string::npos) << flag.err;
}

}  // namespace
}  // namespace zeroshard::testing
