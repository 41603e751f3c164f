#include "model/torch_rank_estimate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<ProcessEstimate> EstimateTorchRank(
    const std::vector<uint64_t>& unit_elems, int workers, int stage,
    Precision precision) {
  if (unit_elems.empty()) {
    return absl::InvalidArgumentError("torch rank estimate: no unit");
  }
  if (workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("torch rank estimate: workers must be >= 1, got ", workers));
  }
  if (stage < 1 || stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("torch rank estimate: stage must be 1, 2 or 3, got ", stage));
  }
  double psi = 0, largest = 0, second = 0;
  for (uint64_t n : unit_elems) {
    if (n == 0) {
      return absl::InvalidArgumentError("torch rank estimate: a unit of 0 elements");
    }
    const double x = static_cast<double>(n);
    psi += x;
    if (x > largest) {
      second = largest;
      largest = x;
    } else {
      second = std::max(second, x);
    }
  }
  const double two = largest + second;  // the running unit and the next
  const double e = precision == Precision::kFp32 ? 4.0 : 2.0;
  const std::string eb = precision == Precision::kFp32 ? "4" : "2";
  ProcessEstimate r;
  if (stage < 3) {
    r.terms.push_back({"flat parameters (compute dtype)", eb + "Ψ", e * psi});
    r.terms.push_back({"flat gradient (compute dtype)", eb + "Ψ", e * psi});
  } else if (workers == 1) {
    r.terms.push_back({"flat gradient (compute dtype)", eb + "Ψ", e * psi});
    r.terms.push_back({"two units gathered (running, prefetched)",
                       eb + "(U1 + U2)", e * two});
  } else {
    r.terms.push_back({"FP32 gradient partition", "4Ψ/N", 4 * psi / workers});
    r.terms.push_back({"two units gathered (running, prefetched)",
                       eb + "(U1 + U2)", e * two});
    r.terms.push_back({"one unit's FP32 gradient sum", "4U1", 4 * largest});
  }
  r.model_state_terms = static_cast<int>(r.terms.size());
  return r;
}

}  // namespace zeroshard
