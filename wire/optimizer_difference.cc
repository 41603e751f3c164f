#include "wire/optimizer_difference.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "absl/strings/strip.h"
#include "common/optimizer_rules.h"
#include "google/protobuf/util/message_differencer.h"
#include "wire/proto_convert.h"

namespace zeroshard {

std::string InConfigWords(absl::string_view line) {
  absl::string_view verb = "";
  for (absl::string_view v : {"modified: ", "added: ", "deleted: "}) {
    if (absl::StartsWith(line, v)) {
      verb = v;
      line.remove_prefix(v.size());
    }
  }
  const size_t colon = line.find(": ");
  if (colon == absl::string_view::npos) return std::string(line);
  const absl::string_view field = line.substr(0, colon);
  std::string rest(line.substr(colon + 2));
  static const std::vector<std::pair<absl::string_view, absl::string_view>>
      kKeys = {{"kind", "optimizer.type"},
               {"rule_params", "optimizer.params"},
               {"rule", "optimizer.type"},
               {"lr", "optimizer.params.lr"},
               {"beta1", "optimizer.params.betas[0]"},
               {"beta2", "optimizer.params.betas[1]"},
               {"eps", "optimizer.params.eps"},
               {"weight_decay", "optimizer.params.weight_decay"},
               {"schedule.kind", "scheduler.type"},
               {"schedule.warmup_type", "scheduler.params.warmup_type"},
               {"schedule.warmup_start_lr",
                "the scheduler's starting lr (warmup_min_lr, or "
                "warmup_min_ratio x lr)"},
               {"schedule.min_lr",
                "the scheduler's final lr (warmup_min_lr, or cos_min_ratio x "
                "lr)"},
               {"param_groups", "zeroshard.param_groups"}};
  std::string key;
  for (const auto& [proto, config] : kKeys) {
    if (field == proto || absl::StartsWith(field, absl::StrCat(proto, "[")) ||
        absl::StartsWith(field, absl::StrCat(proto, "."))) {
      key = absl::StrCat(config, field.substr(proto.size()));
      break;
    }
  }
  if (key.empty()) key = absl::StrCat("optimizer (", field, ")");
  // The enum values as the file spells them.
  static const std::vector<std::pair<absl::string_view, absl::string_view>>
      kValues = {{"ADAMW_8BIT", "AdamW8bit"}, {"ADAM_8BIT", "Adam8bit"},
                 {"ADAMW", "AdamW"},          {"ADAM", "Adam"},
                 {"LION", "Lion"},            {"RULE", "a registered rule"},
                 {"WARMUP_TYPE_LOG", "log"},  {"WARMUP_TYPE_LINEAR", "linear"},
                 {"WARMUP_COSINE", "WarmupCosineLR"},
                 {"WARMUP_LINEAR", "WarmupLR or WarmupDecayLR"},
                 {"CONSTANT", "none"}};
  if (field == "rule") {
    // A rule's name as the file spells its type ("adamw" -> "AdamW").
    std::vector<std::string> sides = absl::StrSplit(rest, " -> ");
    for (std::string& s : sides) {
      const std::string name(absl::StripPrefix(absl::StripSuffix(s, "\""), "\""));
      if (const RuleInfo* r = FindRule(name)) s = r->types.front();
    }
    rest = absl::StrJoin(sides, " -> ");
  } else if (field == "kind" || absl::StartsWith(field, "schedule.")) {
    std::vector<std::string> sides = absl::StrSplit(rest, " -> ");
    for (std::string& s : sides) {
      for (const auto& [wire, file] : kValues) {
        if (s == wire) {
          s = std::string(file);
          break;
        }
      }
    }
    rest = absl::StrJoin(sides, " -> ");
  }
  const std::string how = verb == "added: "     ? " (only now)"
                          : verb == "deleted: " ? " (only in the checkpoint)"
                                                : "";
  return absl::StrCat(key, ": ", rest, how);
}

namespace {

// One form for one optimizer: a checkpoint written before the wire named
// every rule (kind ADAMW, tensor_rule kind MUON) and an Init that names
// them compare as the same; the groups' ranges cleared. As given, ranges
// cleared, when it does not convert.
v1::OptimizerConfig Canonical(v1::OptimizerConfig p) {
  absl::StatusOr<OptimizerConfig> c = FromProto(p);
  if (!c.ok()) return WithoutRanges(std::move(p));
  v1::OptimizerConfig out = ToProto(*c);
  AddParamGroups(ParamGroupsFromProto(p), &out);
  return WithoutRanges(std::move(out));
}

}  // namespace

v1::OptimizerConfig WithoutRanges(v1::OptimizerConfig optimizer) {
  for (v1::ParamGroup& g : *optimizer.mutable_param_groups()) g.clear_ranges();
  return optimizer;
}

std::string OptimizerDifference(v1::OptimizerConfig was,
                                v1::OptimizerConfig now) {
  was = Canonical(std::move(was));
  now = Canonical(std::move(now));
  google::protobuf::util::MessageDifferencer differ;
  differ.set_message_field_comparison(
      google::protobuf::util::MessageDifferencer::EQUIVALENT);
  differ.IgnoreField(
      v1::LrSchedule::descriptor()->FindFieldByName("total_steps"));
  differ.IgnoreField(
      v1::LrSchedule::descriptor()->FindFieldByName("warmup_steps"));
  std::string report;
  differ.ReportDifferencesToString(&report);
  if (differ.Compare(was, now)) return "";
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(report, '\n', absl::SkipEmpty())) {
    // The differencer also lists the ignored fields that differ.
    if (absl::StartsWith(line, "ignored: ")) continue;
    lines.push_back(InConfigWords(line));
  }
  return absl::StrJoin(lines, "; ");
}

absl::StatusOr<v1::OptimizerConfig> OptimizerConfigFromJson(
    absl::string_view json) {
  v1::OptimizerConfig out;
  const auto status = google::protobuf::util::JsonStringToMessage(
      std::string(json), &out);
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat(
        "the checkpoint's optimizer does not parse: ", status.ToString()));
  }
  return out;
}

}  // namespace zeroshard
