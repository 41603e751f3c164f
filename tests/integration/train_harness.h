// Helpers for the zeroshard-train integration tests: small configs written
// into a per-test temporary directory, a bounded run of the real
// zeroshard-train binary, and readers for its outputs (metrics.csv,
// weights.f32 + weights.json).
//
//   TrainDir dir("parity");
//   nlohmann::json cfg = SmallConfig();
//   cfg["zeroshard"]["steps"] = 3;
//   std::string path = dir.WriteConfig("a.json", cfg);
//   TrainRun run = RunTrain({"--config=" + path, "--out=" + dir.path("a")},
//                           absl::Seconds(120));
//   ASSERT_TRUE(run.status.success()) << run.err;
//   auto rows = ReadMetricsCsv(dir.path("a") + "/metrics.csv");
//   auto w = ReadWeights(dir.path("a"));   // name -> values
#ifndef ZEROSHARD_TESTS_INTEGRATION_TRAIN_HARNESS_H_
#define ZEROSHARD_TESTS_INTEGRATION_TRAIN_HARNESS_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "common/subprocess.h"

namespace zeroshard::testing {

// A fresh temporary directory, removed on destruction (kept when the
// environment sets ZS_KEEP_TEST_DIRS=1).
class TrainDir {
 public:
  explicit TrainDir(const std::string& prefix);
  ~TrainDir();
  std::string path(const std::string& name = "") const;
  // Writes `config` (JSON) as <dir>/<name>; returns its path.
  std::string WriteConfig(const std::string& name,
                          const nlohmann::json& config) const;
  std::string WriteText(const std::string& name, const std::string& text) const;

 private:
  std::string dir_;
};

// A small FP32 GPT config: 2 layers, 4 heads, width 128 (every unit a
// multiple of 128 elements, so 1 and 2 workers share one flat layout),
// context 32, vocab 256; 1 server, 1 worker, train_batch_size 8, AdamW
// lr 1e-3 with no warmup, no clipping, metrics.csv and loss.svg, the
// validation loss only after the last step (not every steps_per_print).
nlohmann::json SmallConfig();

struct TrainRun {
  ExitStatus status;
  std::string err;   // zeroshard-train's stderr
  double seconds = 0;
};
// Runs build/bin/zeroshard-train with `args` (stdout/stderr captured),
// killing it after `timeout`.
TrainRun RunTrain(const std::vector<std::string>& args, absl::Duration timeout);

// metrics.csv as rows of column -> text.
std::vector<std::map<std::string, std::string>> ReadMetricsCsv(
    const std::string& path);

// weights.f32 of an --out dir, split by tensor name using weights.json.
std::map<std::string, std::vector<float>> ReadWeights(const std::string& dir);

// Largest |a - b| / (atol + |b|) over all tensors, with the tensor name;
// infinite when the tensor sets differ.
struct WeightDiff {
  double max_abs = 0;
  double max_rel = 0;   // |a-b| / max(|b|, 1e-3)
  std::string worst_tensor;
  bool bit_identical = true;
};
WeightDiff CompareWeights(const std::map<std::string, std::vector<float>>& a,
                          const std::map<std::string, std::vector<float>>& b);

// The initial weights the servers create for `config` (its model shape,
// zeroshard.seed and init_std), by tensor name; computed in process with
// common/init_values, so a test can measure how far training moved.
std::map<std::string, std::vector<float>> InitialWeights(
    const nlohmann::json& config);

// Steps a zeroshard-train run in `out_dir` has reported: the complete rows
// of its metrics.csv (one per applied step, flushed as it is written, never
// repeated after a restart). A half-written last row is not counted.
size_t StepsDone(const std::string& out_dir);

// Waits (polling every 5 ms, bounded by `timeout`) until StepsDone(out_dir)
// reaches `steps`. `ok` false when `run` ended or the time ran out first;
// `last_step` is the time between the polls that first saw steps - 1 and
// steps rows (zero when both were first seen at once), a measure of this
// run's own step time.
struct StepReached {
  bool ok = false;
  absl::Duration last_step = absl::ZeroDuration();
};
StepReached WaitForStep(const std::string& out_dir, size_t steps,
                        Subprocess& run, absl::Duration timeout);

// ||a - b||_2 / ||b - init||_2 over all tensors: how much two runs' weight
// updates differ, relative to the update itself.
double RelativeUpdateDiff(
    const std::map<std::string, std::vector<float>>& a,
    const std::map<std::string, std::vector<float>>& b,
    const std::map<std::string, std::vector<float>>& init);

// "" when the run in `out_dir` (weights.f32, metrics.csv) trained: the mean
// |w - init| over every tensor element is at least 0.5 * lr (Adam moves
// each weight with a gradient by about lr per step), and the last metrics
// row's loss is below the first's. Otherwise what fell short. Two runs that
// agree bit for bit must also have trained, or they may agree by both
// doing nothing.
std::string NotTrained(const std::string& out_dir,
                       const nlohmann::json& config);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_INTEGRATION_TRAIN_HARNESS_H_
