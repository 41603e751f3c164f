// zeroshard-bench quality: the demo's training run (examples/gpt-small.json:
// GPT 4 x 128, byte vocabulary, 300 steps, warmup-cosine schedule, clipping
// 1.0, BF16) in one process (tests/support/local_trainer.h) under each update
// rule whose arithmetic is built: AdamW, AdamW with 8-bit block-wise state,
// Muon on the 2-D matrices with AdamW on the rest, and Adafactor with Hugging
// Face's defaults. Prints each rule's
// training loss (mean of the last 10 steps), validation loss (the held-out
// batches zeroshard-train evaluates for the file) and the bytes per element a
// server would hold for it.
// The ratio: AdamW8bit's validation loss over AdamW's, same run.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "bench/bench.h"
#include "common/config.h"
#include "tests/support/local_trainer.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"

namespace zeroshard::bench {
namespace {

struct RuleRun {
  const char* name;
  LocalRuleOptions options;
  const char* bytes;  // server bytes per element
};

int RunQuality(const std::vector<std::string>& args) {
  std::string config_path = "examples/gpt-small.json";
  uint64_t steps = Smoke() ? 3 : 300;
  double muon_lr = 0.02;
  for (const std::string& a : args) {
    if (absl::StartsWith(a, "--config=")) {
      config_path = a.substr(9);
    } else if (absl::StartsWith(a, "--steps=") &&
               absl::SimpleAtoi(a.substr(8), &steps) && steps > 0) {
    } else if (absl::StartsWith(a, "--muon_lr=") &&
               absl::SimpleAtod(a.substr(10), &muon_lr) && muon_lr > 0) {
    } else {
      std::fprintf(stderr,
                   "usage: zeroshard-bench quality [--config=examples/"
                   "gpt-small.json] [--steps=300] [--muon_lr=0.02]\n  bad "
                   "argument: %s\n",
                   a.c_str());
      return 2;
    }
  }
  ConfigOverrides ov;
  ov.servers = 1;
  ov.workers = 1;
  ov.steps = steps;
  auto parsed = LoadTrainingConfig(config_path, ov);
  if (!parsed.ok()) {
    std::fprintf(stderr, "quality: %s\n", parsed.status().ToString().c_str());
    return 1;
  }
  TrainingConfig cfg = parsed->config;
  // The validation batches the file's own run evaluates: eval_batches on
  // each of its workers (zeroshard-train's "validation" figure).
  auto as_written = LoadTrainingConfig(config_path);
  const int eval_batches =
      std::max(1, cfg.cluster.data.eval_batches *
                      (as_written.ok() ? as_written->config.cluster.workers : 1));
  if (Smoke()) {
    cfg.cluster.model.layers = 1;
    cfg.cluster.model.width = 32;
    cfg.cluster.model.heads = 2;
    cfg.cluster.model.context = 32;
  }
  auto data = Dataset::Load(cfg.cluster.data, cfg.cluster.model.vocab);
  if (!data.ok()) {
    std::fprintf(stderr, "quality: %s\n", data.status().ToString().c_str());
    return 1;
  }
  const int T = cfg.cluster.model.context;
  auto train = BatchSampler::Create(*data, DataSplit::kTrain, T,
                                    cfg.cluster.data.seed);
  auto val = BatchSampler::Create(*data, DataSplit::kValidation, T,
                                  cfg.cluster.data.seed);
  if (!train.ok() || !val.ok()) {
    std::fprintf(stderr, "quality: %s\n",
                 (!train.ok() ? train.status() : val.status())
                     .ToString()
                     .c_str());
    return 1;
  }
  LocalRuleOptions muon;
  muon.rule = LocalRule::kMuonWithAdamW;
  muon.muon.params["lr"] = muon_lr;
  LocalRuleOptions q8;
  q8.rule = LocalRule::kAdamW8bit;
  LocalRuleOptions adafactor;
  adafactor.rule = LocalRule::kAdafactor;
  const RuleRun rules[] = {{"AdamW", {}, "14"},
                           {"AdamW8bit", q8, "8.004"},
                           {"Muon+AdamW", muon, "14 (its matrices need 10)"},
                           {"Adafactor", adafactor,
                            "6 + 4 (rows + cols) / (rows x cols) on matrices, "
                            "10 on the rest"}};
  std::printf("quality: %s, %llu steps, %d x %d GPT, batch %d, AdamW lr %g\n",
              config_path.c_str(), static_cast<unsigned long long>(steps),
              cfg.cluster.model.layers, cfg.cluster.model.width,
              cfg.train_batch_size, cfg.optimizer.lr);
  double val_loss[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    auto t = LocalTrainer::Create(cfg, &*train, rules[k].options);
    if (!t.ok()) {
      std::fprintf(stderr, "quality: %s\n", t.status().ToString().c_str());
      return 1;
    }
    double first = 0, tail = 0;
    int tail_n = 0;
    for (uint64_t s = 0; s < steps; ++s) {
      auto r = (*t)->Step(s);
      if (!r.ok()) {
        std::fprintf(stderr, "quality: %s step %llu: %s\n", rules[k].name,
                     static_cast<unsigned long long>(s),
                     r.status().ToString().c_str());
        return 1;
      }
      if (s == 0) first = r->loss;
      if (s + 10 >= steps) {
        tail += r->loss;
        ++tail_n;
      }
    }
    auto v = (*t)->EvalLoss(*val, Smoke() ? 1 : eval_batches);
    if (!v.ok()) {
      std::fprintf(stderr, "quality: %s\n", v.status().ToString().c_str());
      return 1;
    }
    val_loss[k] = *v;
    std::printf("quality: %-10s loss %.3f -> %.3f (last 10 steps), "
                "validation %.3f; server bytes per element %s\n",
                rules[k].name, first, tail / tail_n, *v, rules[k].bytes);
  }
  std::printf("quality ratio=%.3f target=1.02\n", val_loss[1] / val_loss[0]);
  return 0;
}

}  // namespace

ZS_REGISTER_BENCH("quality",
                  "the demo's 300 steps in process under AdamW, AdamW8bit, "
                  "Muon+AdamW and Adafactor: losses [--steps=300] [--muon_lr=0.02]",
                  RunQuality);

}  // namespace zeroshard::bench
