// Assertions the step-engine tests share: two runs' weights compared bit for
// bit or against the size of the training update, and proof that a run
// trained (so that two runs that agree bit for bit cannot agree by both
// doing nothing).
//
//   ASSERT_OK_AND_ASSIGN(ClusterResult a, RunCluster(cfg));
//   ExpectTrained(a, cfg);                    // loss fell, weights moved ~lr
//   ExpectBitIdentical(a.weights, b.weights, "stage 1 vs 3");
//   ExpectClose(a.weights, b.weights, cfg, "gas 4 vs 1");
#ifndef ZEROSHARD_TESTS_WORKER_ENGINE_ENGINE_CHECKS_H_
#define ZEROSHARD_TESTS_WORKER_ENGINE_ENGINE_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/config.h"
#include "tests/worker/engine/engine_cluster.h"

namespace zeroshard::testing {

// The weights every run of `cfg` starts from (FillInitialValues of the
// config's seed over the whole flat space).
std::vector<float> InitialWeights(const TrainingConfig& cfg);

struct WeightDiff {
  double max_abs = 0;
  double rel_l2 = 0;  // ||a - b|| / ||a - init||
  size_t first_mismatch = SIZE_MAX;
  size_t mismatches = 0;
};
WeightDiff CompareWeights(const std::vector<float>& a,
                          const std::vector<float>& b,
                          const std::vector<float>& init);

// Within FP32 summation-order noise of each other (engine_parity_test.cc
// explains the bound): rel_l2 <= rel and max |a - b| <= max_lr * lr.
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 const TrainingConfig& cfg, const char* what,
                 double rel = 3e-4, double max_lr = 0.2);

void ExpectBitIdentical(const std::vector<float>& a,
                        const std::vector<float>& b, const char* what);

// The run trained: the mean |w - init| over the weights the model uses is
// at least 0.5 * lr (Adam moves every weight with a non-zero gradient by
// about lr per step; a run that applied nothing, or a gradient lost on the
// way, stays near 0), and the loss of the last step is below the first's.
// `weights` may be the servers' (ClusterResult::weights) or a
// LocalTrainer's master.
void ExpectTrainedWeights(const std::vector<float>& weights,
                          const TrainingConfig& cfg, const char* what);
void ExpectTrained(const ClusterResult& r, const TrainingConfig& cfg,
                   const char* what);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_WORKER_ENGINE_ENGINE_CHECKS_H_
