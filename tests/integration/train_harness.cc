#include "tests/integration/train_harness.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/gpt_manifest.h"
#include "common/init_values.h"
#include "common/layout.h"
#include "tests/integration/local_cluster.h"

namespace zeroshard::testing {

TrainDir::TrainDir(const std::string& prefix)
    : dir_(MakeTempDir("zs_train_" + prefix + "_")) {}

TrainDir::~TrainDir() {
  const char* keep = std::getenv("ZS_KEEP_TEST_DIRS");
  if (dir_.empty() || (keep != nullptr && std::strcmp(keep, "1") == 0)) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string TrainDir::path(const std::string& name) const {
  return name.empty() ? dir_ : dir_ + "/" + name;
}

std::string TrainDir::WriteText(const std::string& name,
                                const std::string& text) const {
  const std::string p = path(name);
  std::ofstream(p, std::ios::trunc) << text;
  return p;
}

std::string TrainDir::WriteConfig(const std::string& name,
                                  const nlohmann::json& config) const {
  return WriteText(name, config.dump(2));
}

nlohmann::json SmallConfig() {
  return nlohmann::json::parse(R"({
    "train_batch_size": 8,
    "steps_per_print": 1,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                             "weight_decay": 0.01}},
    "zero_optimization": {"stage": 3},
    "zeroshard": {
      "servers": 1, "workers": 1,
      "model": {"layers": 2, "heads": 4, "width": 128, "vocab": 256,
                "context": 32},
      "steps": 3, "seed": 7,
      "data": {"eval_every_steps": 0},
      "metrics": {"path": "metrics.csv", "format": "csv"},
      "plot": "loss.svg",
      "timeouts": {"step_seconds": 60, "startup_seconds": 30}
    }
  })");
}

TrainRun RunTrain(const std::vector<std::string>& args,
                  absl::Duration timeout) {
  TrainRun run;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<CommandResult> r = RunBinary("zeroshard-train", args, timeout);
  run.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!r.ok()) {
    run.status.exited = true;
    run.status.code = -1;
    run.err = std::string(r.status().message());
    return run;
  }
  run.status = r->status;
  run.err = r->err;
  return run;
}

std::vector<std::map<std::string, std::string>> ReadMetricsCsv(
    const std::string& path) {
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<std::string> header;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n')) {
    if (line.empty()) continue;
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (header.empty()) {
      header = cells;
      continue;
    }
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) {
      row[header[i]] = cells[i];
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::map<std::string, std::vector<float>> ReadWeights(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  const std::string index = ReadFile(dir + "/weights.json");
  const std::string raw = ReadFile(dir + "/weights.f32");
  nlohmann::json j = nlohmann::json::parse(index, nullptr, false);
  if (j.is_discarded() || !j.contains("tensors")) return out;
  const uint64_t total = j["total_elems"].get<uint64_t>();
  if (raw.size() != total * sizeof(float)) return out;
  for (const auto& t : j["tensors"]) {
    const uint64_t off = t["offset"].get<uint64_t>();
    const uint64_t n = t["numel"].get<uint64_t>();
    if (off + n > total) return {};
    std::vector<float> v(n);
    std::memcpy(v.data(), raw.data() + off * sizeof(float), n * sizeof(float));
    out[t["name"].get<std::string>()] = std::move(v);
  }
  return out;
}

WeightDiff CompareWeights(const std::map<std::string, std::vector<float>>& a,
                          const std::map<std::string, std::vector<float>>& b) {
  WeightDiff d;
  const double inf = std::numeric_limits<double>::infinity();
  if (a.size() != b.size() || a.empty()) {
    return {inf, inf, "(different tensor sets)", false};
  }
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) {
      return {inf, inf, name, false};
    }
    for (size_t i = 0; i < va.size(); ++i) {
      const double x = va[i], y = it->second[i];
      if (std::memcmp(&va[i], &it->second[i], sizeof(float)) != 0) {
        d.bit_identical = false;
      }
      const double abs = std::fabs(x - y);
      const double rel = abs / std::max(std::fabs(y), 1e-3);
      if (!(abs <= d.max_abs)) d.max_abs = std::isnan(abs) ? inf : abs;
      if (!(rel <= d.max_rel)) {
        d.max_rel = std::isnan(rel) ? inf : rel;
        d.worst_tensor = name;
      }
    }
  }
  return d;
}

std::map<std::string, std::vector<float>> InitialWeights(
    const nlohmann::json& config) {
  const nlohmann::json& z = config["zeroshard"];
  GptShape shape;
  shape.layers = z["model"]["layers"].get<int>();
  shape.heads = z["model"]["heads"].get<int>();
  shape.width = z["model"]["width"].get<int>();
  shape.vocab = z["model"]["vocab"].get<int>();
  shape.context = z["model"]["context"].get<int>();
  const uint64_t seed = z.value("seed", uint64_t{42});
  const double std = z.value("init_std", 0.02);
  std::map<std::string, std::vector<float>> out;
  auto manifest = MakeGptManifest(shape, 1);
  if (!manifest.ok()) return out;
  auto layout = FlatLayout::Create(*manifest, 1, 1);
  if (!layout.ok()) return out;
  std::vector<float> flat(layout->total_elems());
  FillInitialValues(*layout, seed, std, {0, layout->total_elems()},
                    flat.data());
  for (const TensorInfo& t : layout->tensors()) {
    out[t.name].assign(flat.begin() + t.offset,
                       flat.begin() + t.offset + t.numel);
  }
  return out;
}

double RelativeUpdateDiff(
    const std::map<std::string, std::vector<float>>& a,
    const std::map<std::string, std::vector<float>>& b,
    const std::map<std::string, std::vector<float>>& init) {
  double diff = 0, update = 0;
  for (const auto& [name, vb] : b) {
    auto ia = a.find(name);
    auto ii = init.find(name);
    if (ia == a.end() || ii == init.end() || ia->second.size() != vb.size() ||
        ii->second.size() != vb.size()) {
      return std::numeric_limits<double>::infinity();
    }
    for (size_t i = 0; i < vb.size(); ++i) {
      const double d = ia->second[i] - vb[i];
      const double u = vb[i] - ii->second[i];
      diff += d * d;
      update += u * u;
    }
  }
  return update > 0 ? std::sqrt(diff / update)
                    : std::numeric_limits<double>::infinity();
}

std::string NotTrained(const std::string& out_dir,
                       const nlohmann::json& config) {
  const auto weights = ReadWeights(out_dir);
  const auto init = InitialWeights(config);
  if (weights.empty() || weights.size() != init.size()) {
    return absl::StrCat("no weights (or other tensors) in ", out_dir);
  }
  double moved = 0;
  uint64_t n = 0;
  for (const auto& [name, w] : weights) {
    auto it = init.find(name);
    if (it == init.end() || it->second.size() != w.size()) {
      return absl::StrCat("tensor ", name, " is not the model's");
    }
    for (size_t i = 0; i < w.size(); ++i) {
      moved += std::fabs(static_cast<double>(w[i]) - it->second[i]);
    }
    n += w.size();
  }
  const double lr = config["optimizer"]["params"]["lr"].get<double>();
  const double mean = moved / static_cast<double>(n);
  if (mean < 0.5 * lr) {
    return absl::StrCat("the weights moved by ", mean,
                        " on average, less than lr / 2 = ", lr / 2);
  }
  const auto rows = ReadMetricsCsv(out_dir + "/metrics.csv");
  if (rows.size() < 2) return absl::StrCat("fewer than 2 metrics rows");
  const double first = std::stod(rows.front().at("loss"));
  const double last = std::stod(rows.back().at("loss"));
  if (!(last < first)) {
    return absl::StrCat("the loss did not fall: ", first, " -> ", last);
  }
  return "";
}

size_t StepsDone(const std::string& out_dir) {
  const std::string text = ReadFile(out_dir + "/metrics.csv");
  const size_t lines = std::count(text.begin(), text.end(), '\n');
  return lines > 0 ? lines - 1 : 0;  // the header
}

StepReached WaitForStep(const std::string& out_dir, size_t steps,
                        Subprocess& run, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::optional<absl::Time> saw_previous;
  while (absl::Now() < deadline && !run.Poll().has_value()) {
    const size_t n = StepsDone(out_dir);
    if (n >= steps) {
      return {true, saw_previous.has_value() ? absl::Now() - *saw_previous
                                             : absl::ZeroDuration()};
    }
    if (n + 1 == steps && !saw_previous.has_value()) saw_previous = absl::Now();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return {};
}

}  // namespace zeroshard::testing
