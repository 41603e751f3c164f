// LocalTrainer: the in-process baseline of the ZeRO step. The same GPT, the
// same data and the same AdamW semantics as a cluster of N workers and S
// shard servers, in one process: FP32 master weights, Adam m and v live here,
// there are no servers and no collectives.
//
// It trains exactly what StepEngine trains for the same config:
//   - the flat space of FlatLayout(MakeGptManifest(model, N), 1, N) with
//     N = config.cluster.workers (so its weights compare element by element
//     with a cluster's), initialised by FillInitialValues(seed, init_std);
//   - per step, the micro-batches (micro m, rank r) for m < gas, r < N that
//     the N workers would run (BatchSampler::FillMicroBatch), each computed
//     into a zeroed buffer and added to the step's FP32 gradient;
//   - coefficient = clip_factor / (loss_scale * N * gas) from the global sum
//     of squares (common/grad_clip.h), dynamic loss scaling for fp16
//     (common/loss_scaler.h), and AdamUpdate (optim/optimizer.h) with
//     MakeAdamStep(optimizer, t, coefficient, weight_decay, lr_scale) per
//     parameter group (config.param_groups), t counting applied steps.
// Parameters reach the model in the training dtype as the servers would
// serve them: the BF16 mirror (bf16), FP32 rounded to FP16 (fp16), FP32.
//
//   ASSIGN_OR_RETURN(auto trainer, LocalTrainer::Create(cfg, &sampler));
//   for (uint64_t s = 0; s < cfg.cluster.steps; ++s) {
//     ASSIGN_OR_RETURN(StepResult r, trainer->Step(s));
//   }
//   const std::vector<float>& w = trainer->master();
//
// Steps must run in order from 0 (FAILED_PRECONDITION otherwise). Not
// thread-safe. `sampler` must outlive the trainer.
#ifndef ZEROSHARD_TESTS_SUPPORT_LOCAL_TRAINER_H_
#define ZEROSHARD_TESTS_SUPPORT_LOCAL_TRAINER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "common/layout.h"
#include "common/loss_scaler.h"
#include "data/batch_sampler.h"
#include "worker/engine/step_engine.h"
#include "model/gpt.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "optim/optimizer.h"

namespace zeroshard {

// The update rule LocalTrainer applies in place of the config's, for
// comparing rules in one process (zeroshard-bench quality; a config whose
// matrices group names Muon gets it under kAdamW too, as the servers apply
// it):
// AdamW with 8-bit block-wise m and v (optim/adam8bit.h, blocks of
// kQuant8Block inside each parameter-group span), or Muon (optim/muon.h) on
// every 2-D matrix (TensorClass kMatrix) with AdamW on the rest, as Muon's
// authors prescribe, or Adafactor (optim/adafactor.h, Hugging Face's
// defaults: relative step, no schedule) on every tensor. Muon's learning
// rate follows the config's schedule (scaled by LearningRateAt(t) / lr).
enum class LocalRule { kAdamW, kAdamW8bit, kMuonWithAdamW, kAdafactor };
struct LocalRuleOptions {
  LocalRule rule = LocalRule::kAdamW;
  // kMuonWithAdamW: Muon's hyperparameters (the published defaults).
  TensorRule muon = *MakeTensorRule("muon", {});
  AdafactorOptions adafactor;
};

class LocalTrainer {
 public:
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(
      const TrainingConfig& config, const BatchSampler* sampler,
      LocalRuleOptions rule = {});

  // The mean loss of the current weights over micro-batches 0..batches-1
  // of step 0 of `sampler` (a validation split, say), the gradients
  // discarded: StepEngine::EvalLoss's batches, with N ranks' eval_batches
  // each equal to N * eval_batches here.
  absl::StatusOr<double> EvalLoss(const BatchSampler& sampler, int batches);

  // Runs optimizer step `step` (the next one; see next_step()).
  absl::StatusOr<StepResult> Step(uint64_t step);
  uint64_t next_step() const { return next_step_; }

  // As StepEngine::InjectOverflowAt: the step's gradient becomes non-finite.
  void InjectOverflowAt(uint64_t step) { inject_overflow_step_ = step; }

  const FlatLayout& layout() const { return layout_; }
  // FP32 master weights over the whole flat space (padding stays zero).
  const std::vector<float>& master() const { return master_; }
  // The last step's summed, still scaled FP32 gradient (before the
  // coefficient), over the whole flat space.
  const std::vector<float>& grads() const { return grads_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  uint64_t adam_steps() const { return adam_steps_; }

 private:
  LocalTrainer(const TrainingConfig& config, FlatLayout layout,
               const BatchSampler* sampler, LossScaler scaler,
               std::unique_ptr<model::UnitModel> model, LocalRuleOptions rule);
  // Muon on every 2-D matrix inside `range`, and `adam_below`'s AdamW on
  // the rest of it when given (Muon's authors' split).
  absl::Status MuonOnMatrices(const MuonStep& muon, FlatRange range,
                              const AdamStep* adam_below);
  // A group's Adafactor rule on every tensor inside `range` (a group
  // span), its state where the servers keep it: the first moment in
  // exp_avg, the second in exp_avg_sq (a matrix: rows, then columns).
  absl::Status AdafactorOnTensors(const AdafactorOptions& o, FlatRange range,
                                  float coefficient);
  // The rule's update of one parameter-group span (rule_ != kAdamW).
  absl::Status UpdateSpan(const AdamStep& step, FlatRange range,
                          float coefficient, size_t* absmax_at);
  // Writes the parameters the model reads (params_) from master_.
  void RefreshParams();
  absl::StatusOr<double> MicroBatch(uint64_t step, int micro, int rank);

  const TrainingConfig config_;
  const FlatLayout layout_;
  const BatchSampler* sampler_;
  LossScaler scaler_;
  std::unique_ptr<model::UnitModel> model_;  // the config's architecture
  const DType param_dtype_;
  const int world_;
  const LocalRuleOptions rule_;
  std::vector<float> master_, exp_avg_, exp_avg_sq_;
  // kAdamW8bit: the codes of m and v and their per-block scales.
  std::vector<uint8_t> q_exp_avg_, q_exp_avg_sq_;
  std::vector<float> absmax_m_, absmax_v_;
  // kAdafactor: per tensor (layout order), the row and column statistics
  // of a matrix; a vector's v is exp_avg_sq_ and its m exp_avg_.
  std::vector<std::vector<float>> af_row_, af_col_;
  std::vector<uint16_t> mirror_;    // BF16 mirror (bf16) or FP16 (fp16)
  std::vector<float> grads_;        // the step's sum over micro-batches
  std::vector<float> micro_grads_;  // one micro-batch
  std::vector<int32_t> inputs_, targets_;
  uint64_t next_step_ = 0;
  uint64_t adam_steps_ = 0;
  uint64_t inject_overflow_step_ = UINT64_MAX;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_SUPPORT_LOCAL_TRAINER_H_
