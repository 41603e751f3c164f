// Resolution, validation and the canonical form of TrainingConfig. The JSON
// walk itself is in config_json.cc.
#include "common/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::Status ResolveBatchSizes(std::optional<int> tbs, std::optional<int> mbs,
                               std::optional<int> gas, int world_size, TrainingConfig* c) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  for (const auto& [v, key] : {std::pair{tbs, "train_batch_size"},
                               std::pair{mbs, "train_micro_batch_size_per_gpu"},
                               std::pair{gas, "gradient_accumulation_steps"}}) {
    if (v.has_value() && *v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("config key \"", key, "\" must be >= 1, got ", *v));
    }
  }
  const int64_t ws = world_size;
  // `per_worker`: the given micro-batch size or accumulation count (1 when
  // neither is), so divisor = per_worker * world_size. The message offers
  // the fixes: the nearest batch sizes that divide, and the worker counts
  // with which this one does.
  auto not_divisible = [&](const char* derived, int64_t per_worker) {
    const int64_t divisor = per_worker * ws;
    const int64_t below = *tbs / divisor * divisor;
    std::string fix = absl::StrCat(
        "use train_batch_size ", below > 0 ? absl::StrCat(below, " or ") : "",
        below + divisor);
    if (*tbs % per_worker == 0) {
      std::vector<std::string> counts;
      const int64_t share = *tbs / per_worker;
      for (int64_t w = 1; w <= std::min<int64_t>(share, 1024) && counts.size() < 6; ++w) {
        if (share % w == 0) counts.push_back(absl::StrCat(w));
      }
      absl::StrAppend(&fix, ", or --workers=", absl::StrJoin(counts, ", "));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"train_batch_size\" (", *tbs, ") is not divisible by ", divisor,
        " to derive \"", derived, "\" (train_batch_size = train_micro_batch_size_per_gpu * "
        "gradient_accumulation_steps * world_size, world_size = ", world_size, "): ", fix));
  };
  int64_t t, m, g;
  if (tbs && mbs && gas) {
    t = *tbs, m = *mbs, g = *gas;
    if (t != m * g * ws) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config keys disagree: train_batch_size (", t, ") != train_micro_batch_size_per_gpu (",
          m, ") * gradient_accumulation_steps (", g, ") * world_size (", ws, ") = ", m * g * ws));
    }
  } else if (tbs && mbs) {
    t = *tbs, m = *mbs;
    if (t % (m * ws) != 0) return not_divisible("gradient_accumulation_steps", m);
    g = t / (m * ws);
  } else if (tbs && gas) {
    t = *tbs, g = *gas;
    if (t % (g * ws) != 0) return not_divisible("train_micro_batch_size_per_gpu", g);
    m = t / (g * ws);
  } else if (mbs) {
    m = *mbs, g = gas.value_or(1);
    t = m * g * ws;
  } else if (tbs) {
    t = *tbs, g = 1;
    if (t % ws != 0) return not_divisible("train_micro_batch_size_per_gpu", 1);
    m = t / ws;
  } else {
    return absl::InvalidArgumentError(
        "config needs \"train_batch_size\" or \"train_micro_batch_size_per_gpu\" (a number, "
        "not \"auto\")");
  }
  if (t > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("train_batch_size ", t, " is too large"));
  }
  c->train_batch_size = static_cast<int>(t);
  c->micro_batch_size = static_cast<int>(m);
  c->gradient_accumulation_steps = static_cast<int>(g);
  return absl::OkStatus();
}

absl::Status ValidateTrainingConfig(const TrainingConfig& c) {
  if (c.micro_batch_size < 1 || c.gradient_accumulation_steps < 1 || c.cluster.workers < 1 ||
      static_cast<int64_t>(c.train_batch_size) !=
          static_cast<int64_t>(c.micro_batch_size) * c.gradient_accumulation_steps *
              c.cluster.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sizes inconsistent: train_batch_size ", c.train_batch_size,
        " != micro ", c.micro_batch_size, " * gas ", c.gradient_accumulation_steps,
        " * workers ", c.cluster.workers));
  }
  if (!(c.gradient_clipping >= 0)) {
    return absl::InvalidArgumentError("config key \"gradient_clipping\" must be >= 0");
  }
  if (c.zero.stage < 1 || c.zero.stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key \"zero_optimization.stage\" must be 1, 2 or 3, got ", c.zero.stage));
  }
  if (absl::Status s = ValidateModelShape(c.cluster.model); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key \"zeroshard.model\": ", s.message()));
  }
  if (c.cluster.model.vocab < 256 && c.cluster.data.format == DataFormat::kBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"zeroshard.model.vocab\" must be >= 256 for byte-level tokens "
        "(zeroshard.data.format \"bytes\"), got ",
        c.cluster.model.vocab));
  }
  if (absl::Status s = ValidateOptimizerConfig(c.optimizer); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", s.message()));
  }
  const Fp16Config& f = c.fp16;
  if (f.loss_scale < 0 || f.initial_scale_power < 0 || f.initial_scale_power > 64 ||
      f.loss_scale_window < 1 || f.hysteresis < 1 || !(f.min_loss_scale > 0)) {
    return absl::InvalidArgumentError("config section \"fp16\" has an out-of-range value");
  }
  if (c.precision == Precision::kFp16 && f.loss_scale == 0 &&
      f.min_loss_scale > std::ldexp(1.0, f.initial_scale_power)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"fp16.min_loss_scale\" (", f.min_loss_scale,
        ") exceeds the initial scale 2^initial_scale_power (", std::ldexp(1.0, f.initial_scale_power),
        ")"));
  }
  if (c.activation_checkpointing.policy == CheckpointPolicy::kEveryK &&
      c.activation_checkpointing.k < 1) {
    return absl::InvalidArgumentError(
        "config key \"zeroshard.activation_checkpointing.k\" must be >= 1");
  }
  if (c.cluster.chunk_elems % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"zeroshard.chunk_elems\" must be 0 or a multiple of 64, got ",
        c.cluster.chunk_elems));
  }
  if (IsEightBit(c.optimizer.kind) && c.cluster.chunk_elems % kQ8SlotBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"zeroshard.chunk_elems\" must be 0 or a multiple of ", kQ8SlotBlock,
        " under optimizer.type \"", NameOf(kOptimizerKindNames, c.optimizer.kind),
        "\" (one scale per ", kQ8SlotBlock, " elements of its 8-bit state), got ",
        c.cluster.chunk_elems));
  }
  if (c.cluster.servers < 1 || c.cluster.steps < 1 || !(c.cluster.init_std > 0) ||
      c.cluster.max_overflows_at_min_scale < 1) {
    return absl::InvalidArgumentError(
        "config: zeroshard.servers, steps, init_std and max_overflows_at_min_scale must be "
        "positive");
  }
  if (!c.cluster.server_addresses.empty() &&
      static_cast<int>(c.cluster.server_addresses.size()) != c.cluster.servers) {
    return absl::InvalidArgumentError("config: zeroshard.servers count != address list size");
  }
  if (!(c.cluster.data.validation_fraction >= 0 && c.cluster.data.validation_fraction <= 0.5)) {
    return absl::InvalidArgumentError(
        "config key \"zeroshard.data.validation_fraction\" must be in [0, 0.5]");
  }
  if (c.cluster.data.eval_batches < 0) {
    return absl::InvalidArgumentError("config key \"zeroshard.data.eval_batches\" must be >= 0");
  }
  // Ranges the JSON walk also enforces per key (config_json.cc), checked
  // here too for configs that did not come through it (resolved files).
  for (const auto& [value, key] :
       {std::pair{c.cluster.step_timeout_s, "zeroshard.timeouts.step_seconds"},
        std::pair{c.cluster.startup_timeout_s,
                  "zeroshard.timeouts.startup_seconds"}}) {
    if (!(value >= 1e-3 && value <= 1e7)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", key, "\" must be in [0.001, 1e7] seconds, got ",
          value));
    }
  }
  if (c.steps_per_print < 1 || c.activation_checkpointing.number_checkpoints < 0 ||
      c.activation_checkpointing.k < 1) {
    return absl::InvalidArgumentError(
        "config: steps_per_print and zeroshard.activation_checkpointing.k must be >= 1, "
        "activation_checkpointing.number_checkpoints >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedConfig> LoadTrainingConfig(const std::string& path,
                                                const ConfigOverrides& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading config file ", path));
  absl::StatusOr<ParsedConfig> parsed = ParseTrainingConfig(text.str(), overrides);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path, ": ", parsed.status().message()));
  }
  for (std::string& w : parsed->warnings) w = absl::StrCat(path, ": ", w);
  return parsed;
}

}  // namespace zeroshard
