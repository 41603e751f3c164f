#include "wire/proto_convert.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/optimizer_rules.h"
#include "common/status_macros.h"

namespace zeroshard {

v1::ModelManifest ToProto(const ModelManifest& manifest) {
  v1::ModelManifest out;
  out.set_partition_count(manifest.partition_count);
  out.set_arch(manifest.arch);
  for (const UnitSpec& u : manifest.units) {
    v1::UnitSpec* pu = out.add_units();
    pu->set_name(u.name);
    for (const TensorSpec& t : u.tensors) {
      v1::TensorSpec* pt = pu->add_tensors();
      pt->set_name(t.name);
      for (int64_t d : t.shape) pt->add_shape(d);
      // The C++ enums count from 0; the proto's 0 is "unspecified".
      pt->mutable_init()->set_kind(
          static_cast<v1::InitRule::Kind>(static_cast<int>(t.init.kind) + 1));
      if (t.init.kind == InitRule::Kind::kNormal) {
        pt->mutable_init()->set_std_divisor(t.init.std_divisor);
      }
      pt->set_param_class(
          static_cast<v1::ParamClass>(static_cast<int>(t.param_class) + 1));
      pt->set_keep_whole(t.keep_whole);
    }
  }
  return out;
}

absl::Status CheckManifestRules(const v1::ModelManifest& manifest) {
  for (const v1::UnitSpec& u : manifest.units()) {
    for (const v1::TensorSpec& t : u.tensors()) {
      const int kind = t.init().kind();
      if (kind < v1::InitRule::NORMAL || kind > v1::InitRule::ONES) {
        return absl::InvalidArgumentError(absl::StrCat(
            "manifest tensor '", t.name(), "' of unit '", u.name(),
            "' has no init rule (init.kind ", kind,
            "): the architecture states one per tensor"));
      }
      if (kind == v1::InitRule::NORMAL &&
          !(std::isfinite(t.init().std_divisor()) &&
            t.init().std_divisor() > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "manifest tensor '", t.name(), "': init.std_divisor ",
            t.init().std_divisor(), " is not finite and > 0"));
      }
      if (t.param_class() < v1::MATRIX || t.param_class() > v1::NORM) {
        return absl::InvalidArgumentError(absl::StrCat(
            "manifest tensor '", t.name(), "' of unit '", u.name(),
            "' has no parameter class (param_class ", t.param_class(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

ModelManifest FromProto(const v1::ModelManifest& manifest) {
  ModelManifest out;
  out.partition_count = manifest.partition_count();
  out.arch = manifest.arch();
  for (const v1::UnitSpec& pu : manifest.units()) {
    UnitSpec u;
    u.name = pu.name();
    for (const v1::TensorSpec& pt : pu.tensors()) {
      TensorSpec t{pt.name(), {pt.shape().begin(), pt.shape().end()}};
      // Unspecified (0) and unknown values map to -1 or past the end, which
      // FlatLayout::Create refuses (CheckManifestRules names them first).
      t.init.kind =
          static_cast<InitRule::Kind>(static_cast<int>(pt.init().kind()) - 1);
      if (pt.init().kind() == v1::InitRule::NORMAL) {
        t.init.std_divisor = pt.init().std_divisor();
      }
      t.param_class =
          static_cast<TensorClass>(static_cast<int>(pt.param_class()) - 1);
      t.keep_whole = pt.keep_whole();
      u.tensors.push_back(std::move(t));
    }
    out.units.push_back(std::move(u));
  }
  return out;
}

v1::OptimizerConfig ToProto(const OptimizerConfig& c) {
  // Every rule by its registry name (common/optimizer_rules.h), its own
  // params in the map.
  v1::OptimizerConfig out;
  out.set_kind(v1::OptimizerConfig::RULE);
  out.set_rule(OptimizerName(c));
  for (const auto& [name, value] : c.rule_params) {
    (*out.mutable_rule_params())[name] = value;
  }
  out.set_lr(c.lr);
  out.set_beta1(c.beta1);
  out.set_beta2(c.beta2);
  out.set_eps(c.eps);
  out.set_weight_decay(c.weight_decay);
  v1::LrSchedule* s = out.mutable_schedule();
  s->set_kind(c.schedule == LrScheduleKind::kWarmupCosine
                  ? v1::LrSchedule::WARMUP_COSINE
                  : c.schedule == LrScheduleKind::kWarmupLinear
                        ? v1::LrSchedule::WARMUP_LINEAR
                        : v1::LrSchedule::CONSTANT);
  s->set_warmup_steps(c.warmup_steps);
  s->set_total_steps(c.total_steps);
  s->set_min_lr(c.min_lr);
  s->set_warmup_type(c.warmup_type == WarmupType::kLog ? v1::LrSchedule::WARMUP_TYPE_LOG
                                                       : v1::LrSchedule::WARMUP_TYPE_LINEAR);
  s->set_warmup_start_lr(c.warmup_start_lr);
  return out;
}

absl::StatusOr<OptimizerConfig> FromProto(const v1::OptimizerConfig& p) {
  OptimizerConfig c;
  switch (p.kind()) {
    case v1::OptimizerConfig::ADAMW:
      c.kind = OptimizerKind::kAdamW;
      break;
    case v1::OptimizerConfig::ADAM:
      c.kind = OptimizerKind::kAdam;
      break;
    case v1::OptimizerConfig::LION:
      c.kind = OptimizerKind::kLion;
      break;
    case v1::OptimizerConfig::ADAMW_8BIT:
      c.kind = OptimizerKind::kAdamW8bit;
      break;
    case v1::OptimizerConfig::ADAM_8BIT:
      c.kind = OptimizerKind::kAdam8bit;
      break;
    case v1::OptimizerConfig::RULE: {
      // Any rule by its registry name; one that has a kind of its own
      // ("adamw") reads as that kind, as its files and configs name it.
      const RuleInfo* r = FindRule(p.rule());
      if (r == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer.rule: unknown rule \"", p.rule(),
            "\"; the registered rules: ", RegisteredRuleNames()));
      }
      if (r->kind != OptimizerKind::kRule) {
        if (p.rule_params_size() != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "optimizer.rule_params: rule \"", r->name, "\" takes its params "
              "in the fields lr, beta1, beta2, eps and weight_decay"));
        }
        c.kind = r->kind;
        break;
      }
      c.kind = OptimizerKind::kRule;
      c.rule = p.rule();
      for (const auto& [name, value] : p.rule_params()) {
        c.rule_params[name] = value;
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.kind: unknown value ", p.kind()));
  }
  if (c.kind != OptimizerKind::kRule && p.kind() != v1::OptimizerConfig::RULE &&
      (!p.rule().empty() || p.rule_params_size() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.rule \"", p.rule(), "\" and rule_params belong to kind "
        "RULE, not ", v1::OptimizerConfig::Kind_Name(p.kind())));
  }
  c.lr = p.lr();
  c.beta1 = p.beta1();
  c.beta2 = p.beta2();
  c.eps = p.eps();
  c.weight_decay = p.weight_decay();
  switch (p.schedule().kind()) {
    case v1::LrSchedule::CONSTANT:
      c.schedule = LrScheduleKind::kConstant;
      break;
    case v1::LrSchedule::WARMUP_COSINE:
      c.schedule = LrScheduleKind::kWarmupCosine;
      break;
    case v1::LrSchedule::WARMUP_LINEAR:
      c.schedule = LrScheduleKind::kWarmupLinear;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.schedule.kind: unknown value ",
                       p.schedule().kind()));
  }
  c.warmup_steps = p.schedule().warmup_steps();
  c.total_steps = p.schedule().total_steps();
  c.min_lr = p.schedule().min_lr();
  switch (p.schedule().warmup_type()) {
    case v1::LrSchedule::WARMUP_TYPE_LINEAR:
      c.warmup_type = WarmupType::kLinear;
      break;
    case v1::LrSchedule::WARMUP_TYPE_LOG:
      c.warmup_type = WarmupType::kLog;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.schedule.warmup_type: unknown value ",
                       p.schedule().warmup_type()));
  }
  c.warmup_start_lr = p.schedule().warmup_start_lr();
  return c;
}

v1::DType ToProto(DType dtype) { return static_cast<v1::DType>(dtype); }

absl::StatusOr<DType> FromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FP32:
      return DType::kFp32;
    case v1::DTYPE_BF16:
      return DType::kBf16;
    case v1::DTYPE_FP16:
      return DType::kFp16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", static_cast<int>(dtype),
                       " is not valid here (want DTYPE_FP32 or DTYPE_BF16)"));
  }
}

void AddParamGroups(const std::vector<ResolvedGroup>& groups,
                    v1::OptimizerConfig* out) {
  for (const ResolvedGroup& g : groups) {
    v1::ParamGroup* p = out->add_param_groups();
    p->set_name(g.name);
    p->set_weight_decay(g.weight_decay);
    p->set_lr_scale(g.lr_scale);
    if (g.rule.active()) {
      v1::TensorRule* t = p->mutable_tensor_rule();
      t->set_name(g.rule.name);
      for (const auto& [key, value] : g.rule.params) (*t->mutable_params())[key] = value;
    }
    for (const FlatRange& r : g.ranges) {
      v1::FlatRange* range = p->add_ranges();
      range->set_offset(r.begin);
      range->set_length(r.size());
    }
  }
}

// A tensor rule as the wire carries it: its registry name and its params
// (common/optimizer_rules.h), the spellings of the first named form read
// too (bf16_products for ns_precision, eps1 and eps2 for eps, beta1 absent
// for none); the oldest form, a kind with its own fields, converted.
absl::StatusOr<TensorRule> ParseTensorRuleProto(const v1::TensorRule& in) {
  std::map<std::string, double> params;
  std::string name = in.name();
  if (name.empty()) {
    switch (in.kind()) {
      case v1::TensorRule::NONE:
        return TensorRule{};
      case v1::TensorRule::MUON:
        name = "muon";
        params = {{"lr", in.lr()},
                  {"momentum", in.momentum()},
                  {"nesterov", in.nesterov() ? 1 : 0},
                  {"weight_decay", in.weight_decay()},
                  {"ns_precision", in.bf16_products() ? 1 : 0}};
        break;
      case v1::TensorRule::ADAFACTOR: {
        const v1::AdafactorParams& o = in.adafactor();
        name = "adafactor";
        params = {{"lr", o.lr()},
                  {"eps[0]", o.eps1()},
                  {"eps[1]", o.eps2()},
                  {"clip_threshold", o.clip_threshold()},
                  {"decay_rate", o.decay_rate()},
                  {"beta1", o.has_beta1() ? o.beta1() : -1},
                  {"weight_decay", o.weight_decay()},
                  {"scale_parameter", o.scale_parameter() ? 1 : 0},
                  {"relative_step", o.relative_step() ? 1 : 0},
                  {"warmup_init", o.warmup_init() ? 1 : 0}};
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor_rule kind ", in.kind(), " is not one this server knows"));
    }
  } else {
    static const std::map<std::string, std::string>* const kFirstSpellings =
        new std::map<std::string, std::string>{
            {"bf16_products", "ns_precision"}, {"eps1", "eps[0]"}, {"eps2", "eps[1]"}};
    for (const auto& [key, value] : in.params()) {
      auto alias = kFirstSpellings->find(key);
      params[alias != kFirstSpellings->end() ? alias->second : key] = value;
    }
  }
  if (FindTensorRule(name) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor_rule \"", name, "\" is not one this server knows (", TensorRuleNames(), ")"));
  }
  return MakeTensorRule(name, params, absl::StrCat("tensor_rule ", name));
}

TensorRule TensorRuleFromProto(const v1::TensorRule& in) {
  absl::StatusOr<TensorRule> r = ParseTensorRuleProto(in);
  return r.ok() ? *std::move(r) : TensorRule{};  // ParseTensorRuleProto refuses it
}

std::vector<ResolvedGroup> ParamGroupsFromProto(const v1::OptimizerConfig& in) {
  std::vector<ResolvedGroup> out;
  for (const v1::ParamGroup& p : in.param_groups()) {
    ResolvedGroup g;
    g.name = p.name();
    g.weight_decay = p.weight_decay();
    g.lr_scale = p.lr_scale();
    g.rule = TensorRuleFromProto(p.tensor_rule());
    for (const v1::FlatRange& r : p.ranges()) {
      g.ranges.push_back(FlatRange{r.offset(), r.offset() + r.length()});
      g.elems += r.length();
    }
    out.push_back(std::move(g));
  }
  return out;
}

void SettingToProto(const StepSetting& in, v1::GroupSetting* out) {
  out->set_lr(in.lr);
  out->set_weight_decay(in.weight_decay);
  out->set_beta1(in.beta1);
  out->set_beta2(in.beta2);
  out->set_eps(in.eps);
}

absl::StatusOr<std::vector<StepSetting>> SettingsFromProto(
    const google::protobuf::RepeatedPtrField<v1::GroupSetting>& in) {
  std::vector<StepSetting> out;
  out.reserve(in.size());
  for (const v1::GroupSetting& g : in) {
    out.push_back({g.lr(), g.weight_decay(), g.beta1(), g.beta2(), g.eps()});
    RETURN_IF_ERROR(ValidateStepSetting(out.back(), out.size() - 1));
  }
  return out;
}

}  // namespace zeroshard
