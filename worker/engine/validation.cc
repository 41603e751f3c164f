#include "worker/engine/validation.h"

#include "common/logging.h"

namespace zeroshard {

absl::StatusOr<Validation> Validation::Create(const TrainingConfig& config,
                                              const Dataset& data) {
  Validation v;
  const DataConfig& d = config.cluster.data;
  v.every_ = d.eval_every_steps;
  v.batches_ = d.eval_batches;
  if (d.eval_batches == 0) return v;
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(
      data, DataSplit::kValidation, config.cluster.model.context, d.seed);
  if (!s.ok()) {
    ZS_LOG(WARNING) << "no validation loss: " << s.status().message();
    return v;
  }
  v.sampler_.emplace(*std::move(s));
  return v;
}

bool Validation::Due(uint64_t steps_done, uint64_t total_steps) const {
  if (!enabled()) return false;
  if (steps_done == total_steps) return true;
  return every_ > 0 && steps_done % every_ == 0;
}

absl::StatusOr<double> Validation::Run(StepEngine* engine, uint64_t version) const {
  if (!enabled()) return absl::FailedPreconditionError("validation is off");
  return engine->EvalLoss(version, *sampler_, batches_);
}

}  // namespace zeroshard
