// The tensors a parameter group's rule updates whole (docs/DESIGN.md,
// "Rules for whole tensors"): which they are and how each is shaped for its
// rule (FindWholeTensors, at Init), that a step's pieces cover them
// (CheckWholeTensorsCovered), and their rule's update (optim/
// whole_tensor_rule.h) after the element-wise ones (ApplyWholeTensors). Members of ModelShard
// (server/model_shard.h), apart from its other work.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "optim/optimizer.h"
#include "optim/whole_tensor_rule.h"
#include "server/model_shard.h"
#include "wire/proto_convert.h"

namespace zeroshard {

absl::StatusOr<std::vector<ModelShard::WholeTensor>>
ModelShard::FindWholeTensors(const v1::OptimizerConfig& optimizer,
                             const FlatLayout& layout, FlatRange owned,
                             size_t slots) {
  std::vector<WholeTensor> out;
  for (const v1::ParamGroup& g : optimizer.param_groups()) {
    const TensorRule rule = TensorRuleFromProto(g.tensor_rule());
    if (!rule.active()) continue;
    ASSIGN_OR_RETURN(const WholeTensorRule* update, WholeTensorRuleFor(rule.name));
    for (const v1::FlatRange& pr : g.ranges()) {
      const FlatRange r{pr.offset(), pr.offset() + pr.length()};
      uint64_t covered = 0;
      for (const TensorInfo& t : layout.tensors()) {
        const FlatRange tr = t.range();
        if (Intersect(tr, r).empty()) continue;
        const std::string what = absl::StrCat(
            "tensor '", t.name, "' of parameter group '", g.name(), "' (",
            rule.name, ")");
        if (!r.Contains(tr)) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": the group's range [", r.begin, ", ", r.end,
              ") holds only part of it; a tensor rule updates whole tensors"));
        }
        const std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
        absl::StatusOr<TensorPlan> plan = update->Plan(rule, shape);
        if (!plan.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, " ", plan.status().message()));
        }
        // Its state in the element-wise rule's slots, where the rule's
        // entry places it (common/optimizer_rules.h tensor_state).
        if (absl::Status fits = CheckTensorStateFits(rule, shape, slots); !fits.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(what, " ", fits.message()));
        }
        covered += t.numel;
        if (Intersect(tr, owned).empty()) continue;
        if (!owned.Contains(tr)) {
          return absl::FailedPreconditionError(absl::StrCat(
              what, " [", tr.begin, ", ", tr.end,
              ") straddles this server's range [", owned.begin, ", ",
              owned.end, "): mark it keep_whole in the manifest so that no "
              "server boundary cuts it"));
        }
        out.push_back({t.name, tr, rule, update, *std::move(plan)});
      }
      if (covered != r.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter group '", g.name(), "' (", rule.name,
            "): range [", r.begin, ", ", r.end,
            ") is not made of whole tensors"));
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const WholeTensor& a, const WholeTensor& b) {
              return a.range.begin < b.range.begin;
            });
  return out;
}

absl::Status ModelShard::CheckWholeTensorsCovered(
    absl::Span<const GradPiece> pieces) const {
  if (whole_tensors_.empty()) return absl::OkStatus();
  for (const WholeTensor& w : whole_tensors_) {
    uint64_t covered = 0;
    bool touched = false;
    for (const GradPiece& p : pieces) {
      const uint64_t n = Intersect(p.range, w.range).size();
      touched |= n > 0;
      covered += n;
    }
    if (touched && covered != w.range.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor '", w.name, "' is updated whole by its group's ",
          w.rule.name, " rule: a step's gradient for it must "
          "arrive in one apply (a two-phase commit, as zeroshard-train's "
          "workers make, or one push covering [", w.range.begin, ", ",
          w.range.end, ")); this one holds ", covered, " of its ",
          w.range.size(), " elements"));
    }
  }
  return absl::OkStatus();
}

void ModelShard::ApplyWholeTensors(const StepClaim& claim,
                                   const StepParams& params,
                                   absl::Span<const GradPiece> pieces) {
  thread_local std::vector<float> grad;
  for (const WholeTensor& w : whole_tensors_) {
    // The tensor's gradient, assembled from the claimed segments (the
    // coverage check made them whole).
    uint64_t found = 0, adam_t = 0;
    const GradPiece* single = nullptr;
    for (const ClaimedSegment& seg : claim.segments) {
      const FlatRange part = Intersect(seg.range, w.range);
      if (part.empty()) continue;
      if (found == 0) {
        grad.resize(w.range.size());
        adam_t = seg.adam_t;
      }
      found += part.size();
      const GradPiece& piece = pieces[seg.piece];
      if (piece.range.Contains(w.range) && piece.dtype == DType::kFp32) {
        single = &piece;  // no copy needed
      }
      const size_t from = part.begin - piece.range.begin;
      float* to = grad.data() + (part.begin - w.range.begin);
      if (piece.dtype == DType::kBf16) {
        const char* src =
            static_cast<const char*>(piece.data) + from * sizeof(uint16_t);
        for (uint64_t k = 0; k < part.size(); ++k) {
          uint16_t b;
          std::memcpy(&b, src + k * sizeof(uint16_t), sizeof(b));
          to[k] = Bf16ToFloat(b);
        }
      } else {
        std::memcpy(to,
                    static_cast<const char*>(piece.data) + from * sizeof(float),
                    part.size() * sizeof(float));
      }
    }
    if (found == 0) continue;  // not in this claim
    absl::Cleanup free_large = [&] {
      if (grad.size() > kKeptScratchElems) std::vector<float>().swap(grad);
    };
    const GradView view =
        single != nullptr
            ? GradView::Fp32(reinterpret_cast<const float*>(
                  static_cast<const char*>(single->data) +
                  (w.range.begin - single->range.begin) * sizeof(float)))
            : GradView::Fp32(grad.data());
    // A rule's own lr follows the optimizer's schedule.
    const TensorStep step{
        .t = adam_t,
        .coefficient = static_cast<float>(params.coefficient),
        .schedule_scale = LearningRateAt(optimizer_, adam_t) / optimizer_.lr};
    store_
        ->UpdateWholeRange(
            w.range,
            [&](const StateSlice& s) {
              return w.update->Update(w.rule, step, w.plan, view,
                                      {.master = s.master, .slots = s.slots});
            })
        // Options and shapes were checked at Init; any failure left is
        // recorded as the store's fault(), which fails the step (Apply).
        .IgnoreError();
  }
}

}  // namespace zeroshard
