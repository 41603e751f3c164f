#include "server/param_group_table.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/param_groups.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

bool GoodSetting(double x) { return std::isfinite(x) && x >= 0 && x <= 1e6; }

}  // namespace

absl::StatusOr<ParamGroupTable> ParamGroupTable::Create(
    const v1::OptimizerConfig& optimizer, FlatRange owned,
    uint64_t total_elems) {
  ParamGroupTable table;
  table.base_weight_decay_ = optimizer.weight_decay();
  std::set<std::string> names;
  std::vector<Span> all;
  table.groups_ = static_cast<size_t>(optimizer.param_groups_size());
  int index = 0;
  for (const v1::ParamGroup& g : optimizer.param_groups()) {
    const int group = index++;
    const std::string what = absl::StrCat("optimizer.param_groups '", g.name(), "'");
    if (g.name().empty() || !names.insert(g.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.param_groups: group names must be unique and non-empty "
          "('", g.name(), "')"));
    }
    if (!GoodSetting(g.weight_decay()) || !GoodSetting(g.lr_scale())) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": weight_decay (", g.weight_decay(), ") and lr_scale (",
          g.lr_scale(), ") must be finite and in [0, 1e6]"));
    }
    absl::StatusOr<TensorRule> parsed = ParseTensorRuleProto(g.tensor_rule());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", parsed.status().message()));
    }
    const TensorRule& rule = *parsed;
    if (rule.active()) table.any_rule_ = true;
    for (const v1::FlatRange& r : g.ranges()) {
      if (r.length() == 0 || r.offset() > total_elems ||
          r.length() > total_elems - r.offset()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": range [", r.offset(), ", +", r.length(),
            ") is empty or outside the flat space of ", total_elems,
            " elements"));
      }
      all.push_back({{r.offset(), r.offset() + r.length()}, g.weight_decay(),
                     g.lr_scale(), rule.active(), group});
    }
  }
  std::sort(all.begin(), all.end(), [](const Span& a, const Span& b) {
    return a.range.begin < b.range.begin;
  });
  for (size_t k = 1; k < all.size(); ++k) {
    if (all[k].range.begin < all[k - 1].range.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.param_groups: ranges [", all[k - 1].range.begin, ", ",
          all[k - 1].range.end, ") and [", all[k].range.begin, ", ",
          all[k].range.end, ") overlap"));
    }
  }
  for (Span s : all) {
    s.range = Intersect(s.range, owned);
    if (!s.range.empty()) table.entries_.push_back(s);
  }
  return table;
}

absl::Status ParamGroupTable::CheckSettings(size_t settings) const {
  if (settings == 0) return absl::OkStatus();
  if (any_rule_) {
    return absl::InvalidArgumentError(
        "PushGrad: group_settings with a tensor rule (Muon, Adafactor) in a "
        "group: those rules take the schedule's learning rate");
  }
  if (settings != groups_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushGrad: ", settings, " group_settings for the optimizer's ",
        groups_, " param_groups: one each, in order"));
  }
  return absl::OkStatus();
}

std::vector<ParamGroupTable::Span> ParamGroupTable::Split(
    FlatRange range) const {
  std::vector<Span> out;
  // The first entry ending after range.begin.
  auto it = std::upper_bound(
      entries_.begin(), entries_.end(), range.begin,
      [](uint64_t x, const Span& s) { return x < s.range.end; });
  uint64_t at = range.begin;
  while (at < range.end) {
    if (it == entries_.end() || it->range.begin >= range.end) {
      out.push_back({{at, range.end}, base_weight_decay_, 1.0});
      break;
    }
    if (at < it->range.begin) {
      out.push_back({{at, it->range.begin}, base_weight_decay_, 1.0});
      at = it->range.begin;
    }
    const uint64_t end = std::min(range.end, it->range.end);
    out.push_back({{at, end}, it->weight_decay, it->lr_scale, it->whole,
                   it->group});
    at = end;
    ++it;
  }
  return out;
}

}  // namespace zeroshard
