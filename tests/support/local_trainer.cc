#include "tests/support/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "model/arch.h"
#include "model/gpt_manifest.h"
#include "common/grad_clip.h"
#include "common/init_values.h"
#include "common/optimizer_config.h"
#include "common/status_macros.h"
#include "optim/adam8bit.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "optim/quant8.h"
#include "worker/engine/precision.h"
#include "model/gpt_forward_backward.h"

namespace zeroshard {
namespace {

// A rule "muon"'s step with its lr at `schedule` times its own.
MuonStep MuonStepOf(const TensorRule& r, double schedule, float coefficient) {
  return MakeMuonStep(r.Param("lr") * schedule, r.Param("momentum"),
                      r.Param("weight_decay"), r.Param("nesterov") != 0, coefficient,
                      r.Param("ns_precision") == 1 ? NsPrecision::kBf16 : NsPrecision::kFp32);
}

}  // namespace
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

LocalTrainer::LocalTrainer(const TrainingConfig& config, FlatLayout layout,
                           const BatchSampler* sampler, LossScaler scaler,
                           std::unique_ptr<model::UnitModel> model,
                           LocalRuleOptions rule)
    : config_(config),
      layout_(std::move(layout)),
      sampler_(sampler),
      scaler_(std::move(scaler)),
      model_(std::move(model)),
      param_dtype_(ParamDTypeFor(config.precision)),
      world_(config.cluster.workers),
      rule_(rule) {}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    const TrainingConfig& config, const BatchSampler* sampler,
    LocalRuleOptions rule) {
  if (sampler == nullptr) return absl::InvalidArgumentError("sampler is null");
  RETURN_IF_ERROR(ValidateTrainingConfig(config));
  if (sampler->context() > config.cluster.model.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler context ", sampler->context(), " exceeds the model's ",
        config.cluster.model.context));
  }
  const int n = config.cluster.workers;
  // The config's architecture (model/arch.h): GPT-2 or Llama.
  ASSIGN_OR_RETURN(const model::ModelArch* arch, model::ArchForShape(config.cluster.model));
  ASSIGN_OR_RETURN(ModelManifest manifest, arch->Manifest(config.cluster.model, n));
  ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, 1, n));
  ASSIGN_OR_RETURN(LossScaler scaler,
                   LossScaler::Create(LossScalerOptionsFor(config)));
  const model::CheckpointPolicy policy =
      ModelCheckpointPolicy(config.activation_checkpointing);
  ASSIGN_OR_RETURN(std::unique_ptr<model::UnitModel> m,
                   arch->MakeCpuModel(layout, config.cluster.model,
                                      ParamDTypeFor(config.precision), policy));
  std::unique_ptr<LocalTrainer> t(new LocalTrainer(
      config, std::move(layout), sampler, std::move(scaler), std::move(m),
      rule));
  const uint64_t total = t->layout_.total_elems();
  t->master_.resize(total);
  // ValidateTrainingConfig (above) guarantees init_std > 0.
  FillInitialValues(t->layout_, config.cluster.seed, config.cluster.init_std,
                    FlatRange{0, total}, t->master_.data());
  t->exp_avg_.assign(total, 0.0f);
  t->exp_avg_sq_.assign(total, 0.0f);
  if (rule.rule == LocalRule::kAdafactor) {
    RETURN_IF_ERROR(ValidateAdafactorOptions(rule.adafactor));
    for (const TensorInfo& ti : t->layout_.tensors()) {
      const bool matrix = ti.shape.size() == 2;
      t->af_row_.emplace_back(matrix ? ti.shape[0] : 0, 0.0f);
      t->af_col_.emplace_back(matrix ? ti.shape[1] : 0, 0.0f);
    }
  }
  if (rule.rule == LocalRule::kAdamW8bit) {
    t->q_exp_avg_.assign(total, ZeroCode(Quant8Map::kSigned));
    t->q_exp_avg_sq_.assign(total, ZeroCode(Quant8Map::kUnsigned));
    // Each group span (the ones Step applies) is blocked from its own
    // start, its scales after the previous span's.
    const double wd = config.optimizer.weight_decay;
    size_t blocks = 0;
    for (const GroupSpan& span : GroupSpans(
             ResolveParamGroups(t->layout_, config.param_groups, wd), total,
             wd)) {
      blocks += Quant8Blocks(span.range.size(), kQuant8Block);
    }
    t->absmax_m_.assign(blocks, 0.0f);
    t->absmax_v_.assign(blocks, 0.0f);
  }
  t->grads_.assign(total, 0.0f);
  t->micro_grads_.assign(total, 0.0f);
  if (t->param_dtype_ != DType::kFp32) t->mirror_.resize(total);
  t->RefreshParams();
  const size_t tokens =
      static_cast<size_t>(config.micro_batch_size) * sampler->context();
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  return t;
}

void LocalTrainer::RefreshParams() {
  // bf16: AdamUpdate writes the mirror; refresh only at init and for fp16.
  if (param_dtype_ == DType::kBf16) {
    FloatToBf16Array(master_.data(), mirror_.data(), master_.size());
  } else if (param_dtype_ == DType::kFp16) {
    FloatToFp16Array(master_.data(), mirror_.data(), master_.size());
  }
}

absl::StatusOr<double> LocalTrainer::MicroBatch(uint64_t step, int micro,
                                                int rank) {
  const int b = config_.micro_batch_size;
  const int T = sampler_->context();
  RETURN_IF_ERROR(sampler_->FillMicroBatch(step, rank, world_, micro, b,
                                           absl::MakeSpan(inputs_),
                                           absl::MakeSpan(targets_)));
  const void* params = param_dtype_ == DType::kFp32
                           ? static_cast<const void*>(master_.data())
                           : static_cast<const void*>(mirror_.data());
  std::fill(micro_grads_.begin(), micro_grads_.end(), 0.0f);
  ASSIGN_OR_RETURN(
      model::GptStepResult r,
      model::GptForwardBackward(
          *model_, layout_, params,
          {.batch = b, .seq = T, .tokens = inputs_, .targets = targets_},
          static_cast<float>(scaler_.scale()), absl::MakeSpan(micro_grads_)));
  return r.loss;
}

absl::StatusOr<StepResult> LocalTrainer::Step(uint64_t step) {
  if (step != next_step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LocalTrainer runs steps in order: expected step ", next_step_,
        ", got ", step));
  }
  StepResult r;
  r.step = step;
  r.loss_scale = scaler_.scale();
  const auto t0 = Clock::now();
  const int gas = config_.gradient_accumulation_steps;
  double loss_sum = 0;
  // Each micro-batch's gradient is computed into a zeroed buffer and then
  // added, as the engine's shard accumulates reduce-scattered parts; with
  // N = 1 the additions are the engine's, in the same order.
  for (int m = 0; m < gas; ++m) {
    for (int rank = 0; rank < world_; ++rank) {
      ASSIGN_OR_RETURN(double loss, MicroBatch(step, m, rank));
      loss_sum += loss;
      if (m == 0 && rank == 0) {
        grads_.swap(micro_grads_);
      } else {
        for (size_t i = 0; i < grads_.size(); ++i) grads_[i] += micro_grads_[i];
      }
    }
  }
  r.compute_seconds = Since(t0);
  if (step == inject_overflow_step_ && !grads_.empty()) {
    grads_[0] = std::numeric_limits<float>::infinity();
  }
  const auto t1 = Clock::now();
  const double denom = static_cast<double>(world_) * gas;
  // Summed per unit, in unit order, as the StepEngine does (one worker:
  // bit-identical norms).
  double sumsq = 0;
  for (const UnitInfo& u : layout_.units()) {
    sumsq += GradSumOfSquares(
        absl::MakeConstSpan(grads_.data() + u.offset, u.padded));
  }
  const GradCoefficient c = ComputeGradCoefficient(
      sumsq, scaler_.scale() * denom, config_.gradient_clipping);
  ASSIGN_OR_RETURN(bool apply, scaler_.Update(c.overflow));
  if (apply) {
    ++adam_steps_;
    // Per parameter group (config.param_groups), as the servers apply it.
    const double wd = config_.optimizer.weight_decay;
    size_t absmax_at = 0;
    for (const GroupSpan& span : GroupSpans(
             ResolveParamGroups(layout_, config_.param_groups, wd),
             master_.size(), wd)) {
      const size_t at = span.range.begin;
      const AdamStep s =
          MakeAdamStep(config_.optimizer, adam_steps_,
                       static_cast<float>(c.coefficient), span.weight_decay,
                       span.lr_scale);
      const double scale =
          LearningRateAt(config_.optimizer, adam_steps_) / config_.optimizer.lr;
      if (span.rule.name == "adafactor") {
        RETURN_IF_ERROR(AdafactorOnTensors(
            AdafactorOnSchedule(AdafactorOptionsOf(span.rule), scale), span.range,
                                           static_cast<float>(c.coefficient)));
        continue;
      }
      if (span.rule.active()) {
        // The config's tensor rule (Muon) on the group's whole matrices, as
        // the servers apply it.
        RETURN_IF_ERROR(MuonOnMatrices(
            MuonStepOf(span.rule, scale, static_cast<float>(c.coefficient)),
            span.range, /*adam_below=*/nullptr));
        continue;
      }
      if (rule_.rule != LocalRule::kAdamW) {
        RETURN_IF_ERROR(UpdateSpan(s, span.range,
                                   static_cast<float>(c.coefficient),
                                   &absmax_at));
        continue;
      }
      AdamSlice slice;
      slice.master = master_.data() + at;
      slice.exp_avg = exp_avg_.data() + at;
      slice.exp_avg_sq = exp_avg_sq_.data() + at;
      slice.mirror =
          param_dtype_ == DType::kBf16 ? mirror_.data() + at : nullptr;
      slice.n = span.range.size();
      AdamUpdate(s, GradView::Fp32(grads_.data() + at), slice);
    }
    if (param_dtype_ == DType::kFp16) RefreshParams();
  }
  r.commit_seconds = Since(t1);
  r.loss = loss_sum / denom;
  r.grad_norm = c.norm;
  r.clip_factor = c.clip_factor;
  r.skipped = !apply;
  r.lr = LearningRateAt(config_.optimizer, std::max<uint64_t>(adam_steps_, 1));
  r.tokens = static_cast<uint64_t>(config_.train_batch_size) *
             sampler_->context();
  r.seconds = Since(t0);
  ++next_step_;
  return r;
}

absl::Status LocalTrainer::UpdateSpan(const AdamStep& step, FlatRange range,
                                      float coefficient, size_t* absmax_at) {
  uint16_t* mirror = param_dtype_ == DType::kBf16 ? mirror_.data() : nullptr;
  if (rule_.rule == LocalRule::kAdamW8bit) {
    const size_t at = range.begin;
    const size_t blocks = Quant8Blocks(range.size(), kQuant8Block);
    if (*absmax_at + blocks > absmax_m_.size()) {
      return absl::InternalError("LocalTrainer: 8-bit scales overflow");
    }
    Adam8bitSlice slice{.master = master_.data() + at,
                        .exp_avg = q_exp_avg_.data() + at,
                        .exp_avg_absmax = absmax_m_.data() + *absmax_at,
                        .exp_avg_sq = q_exp_avg_sq_.data() + at,
                        .exp_avg_sq_absmax = absmax_v_.data() + *absmax_at,
                        .mirror = mirror != nullptr ? mirror + at : nullptr,
                        .n = range.size(),
                        .block = kQuant8Block};
    *absmax_at += blocks;
    return Adam8bitUpdateReference(step, GradView::Fp32(grads_.data() + at),
                                   slice);
  }
  if (rule_.rule == LocalRule::kAdafactor) {
    // Each tensor whole, in the span that holds it (the config's groups
    // give Adafactor nothing: its own options decide).
    const std::vector<TensorInfo>& tensors = layout_.tensors();
    for (size_t k = 0; k < tensors.size(); ++k) {
      const TensorInfo& t = tensors[k];
      if (t.offset < range.begin || t.offset + t.numel > range.end) continue;
      const bool matrix = t.shape.size() == 2;
      const AdafactorShape shape{
          matrix ? t.shape[0] : static_cast<int64_t>(t.numel),
          matrix ? t.shape[1] : 0};
      RETURN_IF_ERROR(AdafactorUpdate(
          rule_.adafactor, adam_steps_, coefficient,
          GradView::Fp32(grads_.data() + t.offset), shape,
          {.master = master_.data() + t.offset,
           .row = af_row_[k].data(),
           .col = af_col_[k].data(),
           .exp_avg_sq = exp_avg_sq_.data() + t.offset,
           .exp_avg = exp_avg_.data() + t.offset,
           .mirror = mirror != nullptr ? mirror + t.offset : nullptr}));
    }
    return absl::OkStatus();
  }
  // Muon on the 2-D matrices inside the span, AdamW on the rest.
  const double schedule =
      LearningRateAt(config_.optimizer, std::max<uint64_t>(adam_steps_, 1)) /
      config_.optimizer.lr;
  const MuonStep muon = MuonStepOf(rule_.muon, schedule, coefficient);
  return MuonOnMatrices(muon, range, &step);
}

absl::Status LocalTrainer::MuonOnMatrices(const MuonStep& muon,
                                          FlatRange range,
                                          const AdamStep* adam_below) {
  uint16_t* mirror = param_dtype_ == DType::kBf16 ? mirror_.data() : nullptr;
  thread_local NewtonSchulzScratch scratch;
  uint64_t pos = range.begin;
  auto adam = [&](uint64_t end) {
    if (end <= pos || adam_below == nullptr) return;
    AdamSlice slice{.master = master_.data() + pos,
                    .exp_avg = exp_avg_.data() + pos,
                    .exp_avg_sq = exp_avg_sq_.data() + pos,
                    .mirror = mirror != nullptr ? mirror + pos : nullptr,
                    .n = end - pos};
    AdamUpdate(*adam_below, GradView::Fp32(grads_.data() + pos), slice);
  };
  for (const TensorInfo& t : layout_.tensors()) {
    if (t.param_class != TensorClass::kMatrix || t.shape.size() != 2 ||
        t.offset < range.begin || t.offset + t.numel > range.end) {
      continue;
    }
    adam(t.offset);
    RETURN_IF_ERROR(MuonUpdate(
        muon, GradView::Fp32(grads_.data() + t.offset), t.shape[0],
        t.shape[1], master_.data() + t.offset, exp_avg_.data() + t.offset,
        mirror != nullptr ? mirror + t.offset : nullptr, scratch));
    pos = t.offset + t.numel;
  }
  adam(range.end);  // AdamW's weight decay is the group's, in `step`
  return absl::OkStatus();
}

absl::Status LocalTrainer::AdafactorOnTensors(const AdafactorOptions& o,
                                              FlatRange range,
                                              float coefficient) {
  uint16_t* mirror = param_dtype_ == DType::kBf16 ? mirror_.data() : nullptr;
  for (const TensorInfo& t : layout_.tensors()) {
    if (t.offset < range.begin || t.offset + t.numel > range.end) continue;
    const bool matrix = t.shape.size() == 2;
    const int64_t rows = matrix ? t.shape[0] : static_cast<int64_t>(t.numel);
    float* second = exp_avg_sq_.data() + t.offset;
    RETURN_IF_ERROR(AdafactorUpdate(
        o, adam_steps_, coefficient, GradView::Fp32(grads_.data() + t.offset),
        {rows, matrix ? t.shape[1] : 0},
        {.master = master_.data() + t.offset,
         .row = second,
         .col = second + rows,
         .exp_avg_sq = second,
         .exp_avg = exp_avg_.data() + t.offset,
         .mirror = mirror != nullptr ? mirror + t.offset : nullptr}));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> LocalTrainer::EvalLoss(const BatchSampler& sampler,
                                              int batches) {
  const int b = config_.micro_batch_size;
  const int T = sampler.context();
  if (batches < 1 || T > config_.cluster.model.context) {
    return absl::InvalidArgumentError("EvalLoss: batches < 1 or context too long");
  }
  std::vector<int32_t> in(static_cast<size_t>(b) * T), tg(in.size());
  const void* params = param_dtype_ == DType::kFp32
                           ? static_cast<const void*>(master_.data())
                           : static_cast<const void*>(mirror_.data());
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    // As StepEngine::EvalLoss: step 0's samples, micro-batch i of one rank
    // (the samples N ranks' batches i / N cover together).
    RETURN_IF_ERROR(sampler.FillMicroBatch(0, 0, 1, i, b, absl::MakeSpan(in),
                                           absl::MakeSpan(tg)));
    std::fill(micro_grads_.begin(), micro_grads_.end(), 0.0f);
    ASSIGN_OR_RETURN(
        model::GptStepResult r,
        model::GptForwardBackward(*model_, layout_, params,
                                  {.batch = b, .seq = T, .tokens = in,
                                   .targets = tg},
                                  1.0f, absl::MakeSpan(micro_grads_)));
    sum += r.loss;
  }
  return sum / batches;
}

}  // namespace zeroshard
