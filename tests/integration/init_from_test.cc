// zeroshard-train --init_from=FILE.safetensors through the real processes
// (servers and workers on 127.0.0.1, port 0): the servers' FP32 master
// weights become exactly the file's, training starts from them, a wrong
// file is refused before anything starts, and a second run on servers that
// have trained keeps their weights.
//
// The fixture is written here, by hand (a JSON header and raw bytes), with
// the tensor names and [in, out] Conv1D shapes of Hugging Face's GPT-2, so
// neither direction goes through model/hf_gpt2. A step whose gradient is
// made non-finite (--inject_overflow_at_step) is skipped: it applies
// nothing, so after it the servers still hold exactly what --init_from set,
// which --save_weights then gathers from their FP32 masters.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

const absl::Duration kInitRunTimeout = absl::Seconds(240);

// 2 servers x 2 workers, FP32, width 96: units are not multiples of
// 64 * 2 elements, so the flat space has padding.
nlohmann::json Config() {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["model"]["width"] = 96;
  cfg["zeroshard"]["steps"] = 1;
  return cfg;
}

struct HfTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using HfModel = std::map<std::string, HfTensor>;

// HF GPT2Model's parameters for the config's shape, random values: names
// and shapes as in transformers' modeling_gpt2 (Conv1D weight [in, out]).
HfModel MakeModel(const nlohmann::json& cfg, uint32_t seed) {
  const nlohmann::json& m = cfg["zeroshard"]["model"];
  const int64_t C = m["width"], V = m["vocab"], T = m["context"];
  const int layers = m["layers"];
  std::map<std::string, std::vector<int64_t>> shapes = {
      {"wte.weight", {V, C}}, {"wpe.weight", {T, C}},
      {"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
  for (int i = 0; i < layers; ++i) {
    const std::string p = absl::StrCat("h.", i, ".");
    for (const char* ln : {"ln_1", "ln_2"}) {
      shapes[p + ln + ".weight"] = {C};
      shapes[p + ln + ".bias"] = {C};
    }
    shapes[p + "attn.c_attn.weight"] = {C, 3 * C};
    shapes[p + "attn.c_attn.bias"] = {3 * C};
    shapes[p + "attn.c_proj.weight"] = {C, C};
    shapes[p + "attn.c_proj.bias"] = {C};
    shapes[p + "mlp.c_fc.weight"] = {C, 4 * C};
    shapes[p + "mlp.c_fc.bias"] = {4 * C};
    shapes[p + "mlp.c_proj.weight"] = {4 * C, C};
    shapes[p + "mlp.c_proj.bias"] = {C};
  }
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  HfModel model;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool gain = name.find("ln_") != std::string::npos &&
                      name.find(".weight") != std::string::npos;
    std::vector<float> v(n);
    for (float& x : v) x = (gain ? 1.0f : 0.0f) + normal(rng);
    model[name] = {shape, std::move(v)};
  }
  return model;
}

// Writes `model` as a safetensors file, names prefixed by `prefix`, plus
// the causal-mask buffers h.{i}.attn.bias that the hub's files carry.
void WriteModel(const HfModel& model, const std::string& path,
                const std::string& prefix, int mask_buffers, int64_t context) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape,
                 const std::vector<float>& v) {
    header[name] = {{"dtype", "F32"},
                    {"shape", shape},
                    {"data_offsets", {data.size(), data.size() + 4 * v.size()}}};
    data.append(reinterpret_cast<const char*>(v.data()), 4 * v.size());
  };
  for (const auto& [name, t] : model) add(prefix + name, t.shape, t.values);
  for (int i = 0; i < mask_buffers; ++i) {
    add(absl::StrCat(prefix, "h.", i, ".attn.bias"), {1, 1, context, context},
        std::vector<float>(context * context, 1.0f));
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = h.size();
  ASSERT_TRUE(WriteFile(
      path, std::string(reinterpret_cast<const char*>(&n), 8) + h + data));
}

// Every tensor of `weights` equals the model's bit for bit.
void ExpectExactly(const std::map<std::string, std::vector<float>>& weights,
                   const HfModel& model) {
  ASSERT_EQ(weights.size(), model.size());
  for (const auto& [name, t] : model) {
    auto it = weights.find(name);
    ASSERT_NE(it, weights.end()) << name;
    ASSERT_EQ(it->second.size(), t.values.size()) << name;
    EXPECT_EQ(std::memcmp(it->second.data(), t.values.data(),
                          4 * t.values.size()),
              0)
        << name;
  }
}

// weights.f32 outside every tensor (the padding) is zero.
void ExpectZeroPadding(const std::string& out) {
  const nlohmann::json index =
      nlohmann::json::parse(ReadFile(out + "/weights.json"));
  const std::string raw = ReadFile(out + "/weights.f32");
  const uint64_t total = index["total_elems"];
  const uint64_t params = index["param_elems"];
  ASSERT_EQ(raw.size(), 4 * total);
  ASSERT_LT(params, total) << "the config should make padding";
  std::vector<bool> in_tensor(total, false);
  for (const auto& t : index["tensors"]) {
    const uint64_t off = t["offset"], n = t["numel"];
    for (uint64_t i = off; i < off + n; ++i) in_tensor[i] = true;
  }
  for (uint64_t i = 0; i < total; ++i) {
    if (in_tensor[i]) continue;
    float v;
    std::memcpy(&v, raw.data() + 4 * i, 4);
    ASSERT_EQ(v, 0.0f) << "padding element " << i;
  }
}

uint32_t Seed() {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return seed;
}

TEST(InitFromTest, ServersHoldTheFilesWeightsExactly) {
  TrainDir dir("init_exact");
  const nlohmann::json cfg = Config();
  const HfModel model = MakeModel(cfg, Seed());
  const std::string file = dir.path("gpt2.safetensors");
  WriteModel(model, file, "", 2, cfg["zeroshard"]["model"]["context"]);
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + out, "--quiet", "--init_from=" + file,
                           "--inject_overflow_at_step=0", "--save_weights",
                           "--format=safetensors"},
                          kInitRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
  auto rows = ReadMetricsCsv(out + "/metrics.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("skipped"), "true");  // nothing applied after the set

  ExpectExactly(ReadWeights(out), model);
  ExpectZeroPadding(out);

  // weights.safetensors, read here: the same names (no prefix) and bytes.
  const std::string raw = ReadFile(out + "/weights.safetensors");
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  ASSERT_LE(8 + n, raw.size());
  const nlohmann::json header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["__metadata__"]["zeroshard_step"], "1");
  EXPECT_EQ(header.size(), model.size() + 1);
  for (const auto& [name, t] : model) {
    ASSERT_TRUE(header.contains(name)) << name;
    EXPECT_EQ(header[name]["shape"].get<std::vector<int64_t>>(), t.shape);
    const uint64_t begin = header[name]["data_offsets"][0];
    const uint64_t end = header[name]["data_offsets"][1];
    ASSERT_EQ(end - begin, 4 * t.values.size()) << name;
    EXPECT_EQ(std::memcmp(raw.data() + 8 + n + begin, t.values.data(),
                          4 * t.values.size()),
              0)
        << name;
  }
}

TEST(InitFromTest, TrainingStartsFromTheFile) {
  TrainDir dir("init_train");
  nlohmann::json cfg = Config();
  cfg["zeroshard"]["steps"] = 2;
  const HfModel model = MakeModel(cfg, Seed());
  const std::string file = dir.path("gpt2.safetensors");
  // GPT2LMHeadModel's spelling: "transformer." before every name.
  WriteModel(model, file, "transformer.", 0, 0);
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + out, "--quiet", "--init_from=" + file,
                           "--save_weights"},
                          kInitRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
  const auto weights = ReadWeights(out);
  ASSERT_EQ(weights.size(), model.size());
  // Two AdamW steps move each element by at most about 2 lr from where it
  // started; the servers' own init (std 0.02) is ~0.05 away from the file.
  const double lr = cfg["optimizer"]["params"]["lr"];
  double max_move = 0;
  for (const auto& [name, t] : model) {
    const std::vector<float>& w = weights.at(name);
    for (size_t i = 0; i < w.size(); ++i) {
      max_move = std::max(max_move, std::fabs(double{w[i]} - t.values[i]));
    }
  }
  EXPECT_GT(max_move, 0.5 * lr) << "training did not move the weights";
  EXPECT_LT(max_move, 2.5 * lr) << "the weights did not start at the file's";
}

TEST(InitFromTest, WrongFileIsRefusedBeforeAnythingStarts) {
  TrainDir dir("init_bad");
  const nlohmann::json cfg = Config();
  HfModel model = MakeModel(cfg, 1);
  // A Linear-style [out, in] matrix where HF GPT-2 has Conv1D [in, out].
  HfTensor& fc = model["h.1.mlp.c_fc.weight"];
  std::swap(fc.shape[0], fc.shape[1]);
  const std::string file = dir.path("bad.safetensors");
  WriteModel(model, file, "", 0, 0);
  const std::string config = dir.WriteConfig("c.json", cfg);
  TrainRun run = RunTrain({"--config=" + config, "--out=" + dir.path("out"),
                           "--quiet", "--init_from=" + file},
                          kInitRunTimeout);
  EXPECT_EQ(run.status.code, 2) << run.status.ToString() << "\n" << run.err;
  EXPECT_NE(run.err.find("--init_from"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("'h.1.mlp.c_fc.weight'"), std::string::npos)
      << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path("out") + "/logs/worker0.log"));

  // A file of another model size.
  nlohmann::json wide = cfg;
  wide["zeroshard"]["model"]["width"] = 128;
  WriteModel(MakeModel(wide, 1), file, "", 0, 0);
  run = RunTrain({"--config=" + config, "--out=" + dir.path("out"), "--quiet",
                  "--init_from=" + file},
                 kInitRunTimeout);
  EXPECT_EQ(run.status.code, 2) << run.err;
  EXPECT_NE(run.err.find("has shape"), std::string::npos) << run.err;

  run = RunTrain({"--config=" + config, "--out=" + dir.path("out"), "--quiet",
                  "--init_from=" + dir.path("absent.safetensors")},
                 kInitRunTimeout);
  EXPECT_EQ(run.status.code, 2) << run.err;
  EXPECT_NE(run.err.find("absent.safetensors"), std::string::npos) << run.err;
}

TEST(InitFromTest, ServersThatHaveTrainedKeepTheirWeights) {
  // A rerun with the same flags on the same servers (a restart) continues;
  // it does not start over from the file.
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TrainDir dir("init_rerun");
  nlohmann::json cfg = Config();
  cfg["zeroshard"]["steps"] = 2;
  const std::string config = dir.WriteConfig("c.json", cfg);
  const HfModel model = MakeModel(cfg, Seed());
  const std::string file = dir.path("gpt2.safetensors");
  WriteModel(model, file, "", 0, 0);
  const std::string servers = "--server_addresses=" + (*cluster)->server_list();
  TrainRun first = RunTrain({"--config=" + config, "--out=" + dir.path("a"),
                             "--quiet", servers, "--init_from=" + file,
                             "--save_weights"},
                            kInitRunTimeout);
  ASSERT_TRUE(first.status.success()) << first.err;
  // Step 2 is skipped, so the servers end where the first run left them.
  TrainRun again = RunTrain({"--config=" + config, "--out=" + dir.path("b"),
                             "--quiet", servers, "--init_from=" + file,
                             "--steps=3", "--inject_overflow_at_step=2",
                             "--save_weights"},
                            kInitRunTimeout);
  ASSERT_TRUE(again.status.success()) << again.err;
  auto rows = ReadMetricsCsv(dir.path("b") + "/metrics.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("step"), "2");
  const WeightDiff d =
      CompareWeights(ReadWeights(dir.path("b")), ReadWeights(dir.path("a")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
}

}  // namespace
}  // namespace zeroshard::testing
