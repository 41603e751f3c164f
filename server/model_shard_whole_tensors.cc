// The tensors a parameter group's rule updates whole (docs/DESIGN.md,
// "Rules for whole tensors"): which they are and how each is shaped for its
// rule (FindWholeTensors, at Init), that a step's pieces cover them
// (CheckWholeTensorsCovered), and their Muon or Adafactor updates after the
// element-wise ones (ApplyWholeTensors). Members of ModelShard
// (server/model_shard.h), apart from its other work.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "optim/newton_schulz.h"
#include "optim/optimizer.h"
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
    for (const v1::FlatRange& pr : g.ranges()) {
      const FlatRange r{pr.offset(), pr.offset() + pr.length()};
      uint64_t covered = 0;
      for (const TensorInfo& t : layout.tensors()) {
        const FlatRange tr = t.range();
        if (Intersect(tr, r).empty()) continue;
        const std::string what = absl::StrCat(
            "tensor '", t.name, "' of parameter group '", g.name(), "' (",
            NameOf(kTensorRuleKindNames, rule.kind), ")");
        if (!r.Contains(tr)) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": the group's range [", r.begin, ", ", r.end,
              ") holds only part of it; a tensor rule updates whole tensors"));
        }
        const bool muon = rule.kind == TensorRuleKind::kMuon;
        if (muon && t.shape.size() < 2) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, " has ", t.shape.size(),
              " dimension; Muon updates matrices (a weight of more dimensions "
              "as (out, in * kh * kw), as its published code does)"));
        }
        if (!muon && t.shape.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, " has no dimensions"));
        }
        // Muon: momentum in the first slot. Adafactor: the first moment
        // there, the second moment in the second slot (a matrix's row
        // statistics, then its column statistics).
        // Adafactor factors the last two dimensions, keeping the others
        // (Hugging Face's): `batch` matrices of rows x cols.
        const bool matrix = t.shape.size() >= 2;
        const size_t d = t.shape.size();
        int64_t batch = 1;
        for (size_t k = 0; k + 2 < d; ++k) batch *= t.shape[k];
        const size_t need = muon ? 1 : 2;
        if (need > slots) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, " keeps its state in the element-wise rule's FP32 slots: "
              "it needs ", need, ", the optimizer's rule has ", slots,
              " (choose optimizer.type AdamW or Adam)"));
        }
        if (!muon && matrix &&
            batch * (t.shape[d - 2] + t.shape[d - 1]) > static_cast<int64_t>(t.numel)) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, " is ", batch, " x ", t.shape[d - 2], " x ", t.shape[d - 1],
              ": its row and column statistics (",
              batch * (t.shape[d - 2] + t.shape[d - 1]),
              " values) do not fit its ", t.numel,
              " elements of slot exp_avg_sq; give it to a group without "
              "Adafactor"));
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
        if (muon && t.shape.size() > 2) {
          const int64_t rows = t.shape[0];
          const int64_t cols = static_cast<int64_t>(t.numel) / rows;
          if (rows > (int64_t{1} << 20) || cols > (int64_t{1} << 20)) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, " flattens to ", rows, " x ", cols,
                "; Muon takes at most 2^20 rows and columns"));
          }
          out.push_back({t.name, tr, rows, cols, rule,
                         static_cast<double>(t.shape[d - 2]) / t.shape[d - 1]});
        } else if (!muon && matrix) {
          out.push_back({t.name, tr, t.shape[d - 2], t.shape[d - 1], rule, 0, batch});
        } else {
          out.push_back({t.name, tr, t.shape[0], matrix ? t.shape[1] : 0, rule});
        }
      }
      if (covered != r.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter group '", g.name(), "' (", NameOf(kTensorRuleKindNames, rule.kind),
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
          NameOf(kTensorRuleKindNames, w.rule.kind), " rule: a step's gradient for it must "
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
  thread_local NewtonSchulzScratch scratch;
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
    const double scale = LearningRateAt(optimizer_, adam_t) / optimizer_.lr;
    if (w.rule.kind == TensorRuleKind::kAdafactor) {
      const AdafactorOptions o = AdafactorOnSchedule(w.rule.adafactor, scale);
      const AdafactorShape shape{w.rows, w.cols, w.batch};
      store_
          ->UpdateWholeRange(
              w.range,
              [&](const StateSlice& s) {
                return AdafactorUpdate(
                    o, adam_t, static_cast<float>(params.coefficient), view,
                    shape,
                    {.master = s.master,
                     .row = s.slots[1],
                     .col = s.slots[1] + w.batch * w.rows,
                     .exp_avg_sq = s.slots[1],
                     .exp_avg = s.slots[0],
                     .mirror = nullptr});
              })
          .IgnoreError();  // a failure is the store's fault(): see below
      continue;
    }
    MuonStep step = MakeMuonStep(
        w.rule.lr * scale, w.rule.momentum, w.rule.weight_decay,
        w.rule.nesterov, static_cast<float>(params.coefficient),
        w.rule.bf16_products ? NsPrecision::kBf16 : NsPrecision::kFp32);
    step.aspect = w.aspect;
    // The momentum buffer is the element-wise rule's first slot.
    store_
        ->UpdateWholeRange(
            w.range,
            [&](const StateSlice& s) {
              return MuonUpdate(step, view, w.rows, w.cols, s.master,
                                s.slots[0], /*mirror=*/nullptr, scratch);
            })
        // Options and shapes were checked at Init; any failure left is
        // recorded as the store's fault(), which fails the step (Apply).
        .IgnoreError();
  }
}

}  // namespace zeroshard
