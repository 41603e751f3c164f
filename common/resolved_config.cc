// Writer and reader of the resolved configuration share one list of fields
// (VisitConfig), so that a field cannot be written and forgotten on reading.
#include "common/resolved_config.h"

#include <cstdint>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"
#include "common/json_integer.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

using nlohmann::json;

constexpr char kMarker[] = "zeroshard_resolved_config";

// Every field of a TrainingConfig, in file order: the one list of them that
// the resolved config's writer and reader and the canonical form
// (CanonicalJson, ConfigFingerprint) all read. V provides
//   Object(name, fn, canonical = true)
//                           a nested object whose fields fn visits; not in
//                           the canonical form when `canonical` is false
//   Field(name, T& value)   a number, bool, string or list of strings
//   Enum(name, E& value, names)
//   Local(fn)               fields that do not change what the run trains
//                           (outputs, timeouts, addresses, DeepSpeed keys
//                           recorded without effect): in the resolved config,
//                           not in the canonical form
template <typename V>
void VisitConfig(V& v, TrainingConfig& c) {
  v.Field("train_batch_size", c.train_batch_size);
  v.Field("micro_batch_size", c.micro_batch_size);
  v.Field("gradient_accumulation_steps", c.gradient_accumulation_steps);
  v.Field("gradient_clipping", c.gradient_clipping);
  v.Enum("precision", c.precision, kPrecisionNames);
  v.Enum("communication_data_type", c.communication_data_type, kCommDataTypeNames);
  // The fp16 section shapes the run only when it trains in fp16.
  v.Object("fp16", [&] {
    Fp16Config& f = c.fp16;
    v.Field("loss_scale", f.loss_scale);
    v.Field("initial_scale_power", f.initial_scale_power);
    v.Field("loss_scale_window", f.loss_scale_window);
    v.Field("hysteresis", f.hysteresis);
    v.Field("min_loss_scale", f.min_loss_scale);
    v.Field("consecutive_hysteresis", f.consecutive_hysteresis);
  }, c.precision == Precision::kFp16);
  v.Object("optimizer", [&] {
    OptimizerConfig& o = c.optimizer;
    v.Enum("kind", o.kind, kOptimizerKindNames);
    v.Field("lr", o.lr);
    v.Field("beta1", o.beta1);
    v.Field("beta2", o.beta2);
    v.Field("eps", o.eps);
    v.Field("weight_decay", o.weight_decay);
    v.Enum("schedule", o.schedule, kLrScheduleKindNames);
    v.Field("warmup_steps", o.warmup_steps);
    v.Field("total_steps", o.total_steps);
    v.Field("min_lr", o.min_lr);
    v.Enum("warmup_type", o.warmup_type, kWarmupTypeNames);
    v.Field("warmup_start_lr", o.warmup_start_lr);
    // Read after "kind", so the reader sees the kind that owns them.
    if (o.kind == OptimizerKind::kRule) {
      v.Field("rule", o.rule);
      v.Field("rule_params", o.rule_params);
    }
  });
  v.Object("param_groups", [&] {
    ParamGroups& g = c.param_groups;
    v.Field("single", g.single);
    for (int k = 0; k < kNumTensorClasses; ++k) {
      v.Object(TensorClassName(static_cast<TensorClass>(k)).data(), [&] {
        v.Field("optimizer_weight_decay", g.classes[k].optimizer_weight_decay);
        v.Field("weight_decay", g.classes[k].weight_decay);
        v.Field("lr_scale", g.classes[k].lr_scale);
        // A rule of the registry (common/optimizer_rules.h): its name,
        // then (read after it) every param by keyword.
        v.Object("rule", [&] {
          TensorRule& r = g.classes[k].rule;
          v.Field("name", r.name);
          if (r.active()) v.Field("params", r.params);
        });
      });
    }
  });
  v.Object("zero", [&] {
    ZeroConfig& z = c.zero;
    v.Field("stage", z.stage);
    v.Local([&] {
    v.Enum("offload_optimizer", z.offload_optimizer, kOffloadDeviceNames);
    v.Field("offload_pin_memory", z.offload_pin_memory);
    v.Field("overlap_comm", z.overlap_comm);
    v.Field("contiguous_gradients", z.contiguous_gradients);
    v.Field("allgather_bucket_size", z.allgather_bucket_size);
    v.Field("reduce_bucket_size", z.reduce_bucket_size);
    v.Field("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size);
    v.Field("stage3_param_persistence_threshold",
            z.stage3_param_persistence_threshold);
    v.Field("stage3_max_live_parameters", z.stage3_max_live_parameters);
    v.Field("stage3_max_reuse_distance", z.stage3_max_reuse_distance);
    });
  });
  v.Object("activation_checkpointing", [&] {
    ActivationCheckpointingConfig& a = c.activation_checkpointing;
    v.Local([&] {
    v.Field("partition_activations", a.partition_activations);
    v.Field("cpu_checkpointing", a.cpu_checkpointing);
    v.Field("contiguous_memory_optimization",
            a.contiguous_memory_optimization);
    v.Field("number_checkpoints", a.number_checkpoints);
    v.Field("synchronize_checkpoint_boundary",
            a.synchronize_checkpoint_boundary);
    v.Field("profile", a.profile);
    });
    v.Enum("policy", a.policy, kCheckpointPolicyNames);
    v.Field("k", a.k);
  });
  v.Local([&] {
    v.Field("steps_per_print", c.steps_per_print);
    v.Field("wall_clock_breakdown", c.wall_clock_breakdown);
  });
  v.Object("cluster", [&] {
    ClusterConfig& z = c.cluster;
    v.Field("servers", z.servers);
    v.Local([&] { v.Field("server_addresses", z.server_addresses); });
    v.Field("workers", z.workers);
    v.Local([&] { v.Enum("placement", z.placement, kPlacementNames); });
    v.Object("model", [&] {
      v.Field("arch", z.model.arch);
      v.Field("layers", z.model.layers);
      v.Field("heads", z.model.heads);
      v.Field("width", z.model.width);
      v.Field("vocab", z.model.vocab);
      v.Field("context", z.model.context);
      // Read after "arch": only an architecture with them writes them, so
      // GPT-2's canonical form is what it was.
      if (z.model.arch != "gpt2") {
        v.Field("kv_heads", z.model.kv_heads);
        v.Field("mlp_width", z.model.mlp_width);
        v.Field("rope_theta", z.model.rope_theta);
        v.Field("norm_eps", z.model.norm_eps);
        v.Field("tie_embeddings", z.model.tie_embeddings);
      }
    });
    v.Object("data", [&] {
      v.Field("paths", z.data.paths);
      v.Field("seed", z.data.seed);
      v.Field("validation_fraction", z.data.validation_fraction);
      v.Field("validation_paths", z.data.validation_paths);
      v.Enum("format", z.data.format, kDataFormatNames);
      v.Field("eval_every_steps", z.data.eval_every_steps);
      v.Field("eval_batches", z.data.eval_batches);
    });
    v.Field("steps", z.steps);
    v.Field("seed", z.seed);
    v.Field("init_std", z.init_std);
    v.Field("chunk_elems", z.chunk_elems);
    v.FieldUnlessDefault("replicas", z.replicas, 1);
    v.Local([&] {
      v.Field("metrics_path", z.metrics_path);
      v.Enum("metrics_format", z.metrics_format, kMetricsFormatNames);
      v.Field("plot_path", z.plot_path);
      v.Object("checkpoint", [&] {
        v.Field("dir", z.checkpoint.dir);
        v.Field("every_steps", z.checkpoint.every_steps);
        v.Field("keep_last", z.checkpoint.keep_last);
      });
      v.Field("credentials", z.credentials);
      v.Field("step_timeout_s", z.step_timeout_s);
      v.Field("startup_timeout_s", z.startup_timeout_s);
      v.Field("shared_memory", z.shared_memory);
      v.FieldUnlessDefault("replica_check_every_steps", z.replica_check_every_steps,
                           uint64_t{10});
    });
    v.Field("max_overflows_at_min_scale", z.max_overflows_at_min_scale);
  });
}

// Writes every field, or with `canonical_only` only those of the canonical
// form.
class Writer {
 public:
  explicit Writer(json* root, bool canonical_only = false)
      : stack_{root}, canonical_only_(canonical_only) {}

  void Local(const std::function<void()>& fields) {
    if (!canonical_only_) fields();
  }
  void Object(const char* name, const std::function<void()>& fields,
              bool canonical = true) {
    if (canonical_only_ && !canonical) return;
    json* obj = &(*stack_.back())[name];
    *obj = json::object();
    stack_.push_back(obj);
    fields();
    stack_.pop_back();
  }
  template <typename T>
  void Field(const char* name, const T& value) {
    (*stack_.back())[name] = value;
  }
  // A field written only away from its default (so that the forms written
  // before it existed stay the same); read whenever it is there.
  template <typename T>
  void FieldUnlessDefault(const char* name, const T& value, const T& def) {
    if (value != def) Field(name, value);
  }
  template <typename E, size_t N>
  void Enum(const char* name, const E& value, const EnumNames<E, N>& names) {
    for (const auto& [e, text] : names) {
      if (e == value) (*stack_.back())[name] = text;
    }
  }

 private:
  std::vector<json*> stack_;
  bool canonical_only_;
};

class Reader {
 public:
  explicit Reader(const json* root) : stack_{{root, "config"}} {}

  const absl::Status& status() const { return status_; }

  void Local(const std::function<void()>& fields) { fields(); }
  void Object(const char* name, const std::function<void()>& fields,
              bool /*canonical*/ = true) {
    const json* j = Find(name);
    if (j == nullptr) return;
    if (!j->is_object()) return Fail(name, "is not an object");
    stack_.push_back({j, Path(name)});
    fields();
    CheckNoUnknownKeys();
    stack_.pop_back();
  }
  template <typename T>
  void FieldUnlessDefault(const char* name, T& value, const T& def) {
    if (status_.ok() && !stack_.back().object->contains(name)) {
      stack_.back().seen.insert(name);
      value = def;
      return;
    }
    Field(name, value);
  }
  template <typename T>
  void Field(const char* name, T& value) {
    const json* j = Find(name);
    if (j == nullptr) return;
    if constexpr (std::is_same_v<T, bool>) {
      if (!j->is_boolean()) return Fail(name, "is not a boolean");
      value = j->get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!j->is_string()) return Fail(name, "is not a string");
      value = j->get<std::string>();
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!j->is_array()) return Fail(name, "is not a list of strings");
      value.clear();
      for (const json& e : *j) {
        if (!e.is_string()) return Fail(name, "is not a list of strings");
        value.push_back(e.get<std::string>());
      }
    } else if constexpr (std::is_same_v<T, std::map<std::string, double>>) {
      if (!j->is_object()) return Fail(name, "is not an object of numbers");
      value.clear();
      for (auto it = j->begin(); it != j->end(); ++it) {
        if (!it->is_number()) return Fail(name, "is not an object of numbers");
        value[it.key()] = it->get<double>();
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!j->is_number()) return Fail(name, "is not a number");
      value = j->get<T>();
    } else {
      switch (ReadJsonInteger(*j, &value)) {
        case JsonInteger::kOk:
          return;
        case JsonInteger::kNotInteger:
          return Fail(name, "is not an integer");
        case JsonInteger::kNegative:
          return Fail(name, "is negative");
        case JsonInteger::kOutOfRange:
          return Fail(name, "is out of range");
      }
    }
  }
  template <typename E, size_t N>
  void Enum(const char* name, E& value, const EnumNames<E, N>& names) {
    const json* j = Find(name);
    if (j == nullptr) return;
    std::vector<std::string> known;
    for (const auto& [e, text] : names) {
      if (j->is_string() && j->get<std::string>() == text) {
        value = e;
        return;
      }
      known.push_back(absl::StrCat("\"", text, "\""));
    }
    Fail(name, absl::StrCat("is not one of ", absl::StrJoin(known, ", ")));
  }

  void CheckNoUnknownKeys() {
    const Level& level = stack_.back();
    for (const auto& [key, unused] : level.object->items()) {
      if (level.seen.count(key) == 0) {
        Fail(key.c_str(), "is not a field of the resolved configuration");
      }
    }
  }

 private:
  struct Level {
    const json* object;
    std::string path;
    std::set<std::string> seen;
  };

  std::string Path(const char* name) const {
    return absl::StrCat(stack_.back().path, ".", name);
  }
  // The member `name` of the current object; records the first error.
  const json* Find(const char* name) {
    if (!status_.ok()) return nullptr;
    Level& level = stack_.back();
    level.seen.insert(name);
    auto it = level.object->find(name);
    if (it == level.object->end()) {
      Fail(name, "is missing");
      return nullptr;
    }
    return &*it;
  }
  void Fail(const char* name, absl::string_view why) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("resolved configuration: \"", Path(name), "\" ", why));
    }
  }

  std::vector<Level> stack_;
  absl::Status status_;
};

}  // namespace

std::string CanonicalJson(const TrainingConfig& config) {
  // json objects keep keys sorted: the form is canonical.
  json j = json::object();
  Writer writer(&j, /*canonical_only=*/true);
  VisitConfig(writer, const_cast<TrainingConfig&>(config));
  return j.dump();
}

uint64_t ConfigFingerprint(const TrainingConfig& config) {
  return Fnv1a64(CanonicalJson(config));
}

std::string ResolvedConfigJson(const TrainingConfig& config) {
  json inner = json::object();
  Writer writer(&inner);
  VisitConfig(writer, const_cast<TrainingConfig&>(config));
  json root = json::object();
  root[kMarker] = kResolvedConfigVersion;
  root["config"] = std::move(inner);
  return root.dump(2) + "\n";
}

absl::StatusOr<TrainingConfig> ParseResolvedConfig(std::string_view text) {
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        "resolved configuration: not a JSON object");
  }
  auto marker = root.find(kMarker);
  if (marker == root.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a resolved configuration (no \"", kMarker,
        "\" key): resolve a DeepSpeed-style file first with `zeroshard-ctl "
        "config --config=FILE --workers=N --servers=S --out=RESOLVED` "
        "(zeroshard-train does this itself)"));
  }
  if (!marker->is_number_integer() ||
      marker->get<int64_t>() != kResolvedConfigVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resolved configuration: \"", kMarker, "\" is ", marker->dump(),
        "; this build reads version ", kResolvedConfigVersion));
  }
  for (const auto& [key, unused] : root.items()) {
    if (key != kMarker && key != "config") {
      return absl::InvalidArgumentError(absl::StrCat(
          "resolved configuration: unknown top-level key \"", key, "\""));
    }
  }
  auto inner = root.find("config");
  if (inner == root.end() || !inner->is_object()) {
    return absl::InvalidArgumentError(
        "resolved configuration: \"config\" is missing or not an object");
  }
  TrainingConfig config;
  Reader reader(&*inner);
  VisitConfig(reader, config);
  reader.CheckNoUnknownKeys();
  if (!reader.status().ok()) return reader.status();
  absl::Status valid = ValidateTrainingConfig(config);
  if (!valid.ok()) {
    return absl::Status(valid.code(), absl::StrCat("resolved configuration: ",
                                                   valid.message()));
  }
  return config;
}

absl::StatusOr<TrainingConfig> LoadResolvedConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading config file ", path));
  }
  absl::StatusOr<TrainingConfig> config = ParseResolvedConfig(text.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace zeroshard
