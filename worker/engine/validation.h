// Validation: when the validation loss is computed and on which samples
// (zeroshard.data: eval_every_steps, eval_batches; docs/DESIGN.md, "Data").
//
// After every eval_every_steps-th optimizer step (steps_done % K == 0) and
// after the last one, every worker runs eval_batches forward-only
// micro-batches of the validation split — the same fixed samples each time
// (the sampler's step 0) — and the losses are averaged over all workers
// (StepEngine::EvalLoss). Off when eval_batches is 0, or (with a warning)
// when the validation split is empty or shorter than context + 1 tokens.
//
//   ASSIGN_OR_RETURN(Validation val, Validation::Create(cfg, dataset));
//   ... after engine->Step(step) ...
//   if (val.Due(step + 1, cfg.cluster.steps)) {
//     ASSIGN_OR_RETURN(double v, val.Run(engine.get(), step + 1));
//   }
//
// Every rank must make the same calls (EvalLoss is collective).
#ifndef ZEROSHARD_WORKER_ENGINE_VALIDATION_H_
#define ZEROSHARD_WORKER_ENGINE_VALIDATION_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "worker/engine/step_engine.h"

namespace zeroshard {

class Validation {
 public:
  static absl::StatusOr<Validation> Create(const TrainingConfig& config, const Dataset& data);

  bool enabled() const { return sampler_.has_value(); }
  // Whether to evaluate once `steps_done` of `total_steps` steps are done.
  bool Due(uint64_t steps_done, uint64_t total_steps) const;
  // The validation loss of the parameters at `version`.
  absl::StatusOr<double> Run(StepEngine* engine, uint64_t version) const;

 private:
  Validation() = default;

  std::optional<BatchSampler> sampler_;
  uint64_t every_ = 0;
  int batches_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_VALIDATION_H_
