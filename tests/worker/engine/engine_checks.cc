#include "tests/worker/engine/engine_checks.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "tests/worker/engine/engine_cluster.h"
#include "model/gpt_manifest.h"
#include "common/init_values.h"
#include "common/layout.h"
#include "gtest/gtest.h"

namespace zeroshard::testing {

std::vector<float> InitialWeights(const TrainingConfig& cfg) {
  auto manifest = ManifestFor(cfg);
  auto layout = FlatLayout::Create(*manifest, 1, cfg.cluster.workers);
  std::vector<float> w(layout->total_elems());
  FillInitialValues(*layout, cfg.cluster.seed, cfg.cluster.init_std,
                    FlatRange{0, w.size()}, w.data());
  return w;
}

WeightDiff CompareWeights(const std::vector<float>& a,
                          const std::vector<float>& b,
                          const std::vector<float>& init) {
  WeightDiff d;
  double diff2 = 0, update2 = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (d.first_mismatch == SIZE_MAX) d.first_mismatch = i;
      ++d.mismatches;
    }
    d.max_abs = std::max(d.max_abs, std::fabs(e));
    diff2 += e * e;
    const double u = static_cast<double>(a[i]) - init[i];
    update2 += u * u;
  }
  d.rel_l2 = update2 > 0 ? std::sqrt(diff2 / update2) : std::sqrt(diff2);
  return d;
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 const TrainingConfig& cfg, const char* what, double rel,
                 double max_lr) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const WeightDiff d = CompareWeights(a, b, InitialWeights(cfg));
  EXPECT_LE(d.rel_l2, rel) << what;
  EXPECT_LE(d.max_abs, max_lr * cfg.optimizer.lr) << what;
  std::printf("[ %s ] rel_l2=%.3g max_abs=%.3g (%.3g lr) bit_identical=%d\n",
              what, d.rel_l2, d.max_abs, d.max_abs / cfg.optimizer.lr,
              d.first_mismatch == SIZE_MAX);
}

void ExpectBitIdentical(const std::vector<float>& a,
                        const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0, first = SIZE_MAX;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first == SIZE_MAX) first = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": first mismatch at " << first << " ("
                     << (first < a.size() ? a[first] : 0) << " vs "
                     << (first < a.size() ? b[first] : 0) << ")";
}

void ExpectTrainedWeights(const std::vector<float>& weights,
                          const TrainingConfig& cfg, const char* what) {
  const std::vector<float> init = InitialWeights(cfg);
  ASSERT_EQ(weights.size(), init.size()) << what;
  auto manifest = ManifestFor(cfg);
  auto layout = FlatLayout::Create(*manifest, 1, cfg.cluster.workers);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Over the tensors' elements: padding receives no gradient and stays 0.
  double moved = 0;
  uint64_t n = 0;
  for (const TensorInfo& t : layout->tensors()) {
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) {
      moved += std::fabs(static_cast<double>(weights[i]) - init[i]);
    }
    n += t.numel;
  }
  const double mean = moved / static_cast<double>(n);
  EXPECT_GE(mean, 0.5 * cfg.optimizer.lr)
      << what << ": the weights moved by " << mean << " on average";
  std::printf("[ %s ] trained: mean |w - init| = %.3g (%.3g lr)\n", what,
              mean, mean / cfg.optimizer.lr);
}

void ExpectTrained(const ClusterResult& r, const TrainingConfig& cfg,
                   const char* what) {
  ExpectTrainedWeights(r.weights, cfg, what);
  ASSERT_FALSE(r.ranks.empty()) << what;
  const std::vector<StepResult>& steps = r.ranks[0].steps;
  ASSERT_GE(steps.size(), 2u) << what;
  EXPECT_LT(steps.back().loss, steps.front().loss)
      << what << ": the loss did not fall";
  std::printf("[ %s ] loss %.4f -> %.4f over %zu steps\n", what,
              steps.front().loss, steps.back().loss, steps.size());
}

}  // namespace zeroshard::testing
