#include "model/torch_rank_estimate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zeroshard {

double SimulatedGatheredPeak(const std::vector<uint64_t>& unit_elems,
                             const TorchZero3Keep& keep) {
  const int n = static_cast<int>(unit_elems.size());
  std::vector<int> trace;
  for (int i = 0; i < n; ++i) trace.push_back(i);
  for (int i = n - 1; i >= 0; --i) trace.push_back(i);
  const size_t len = trace.size();
  std::vector<double> cum(len + 1, 0);  // elements of the uses before i
  for (size_t i = 0; i < len; ++i) {
    cum[i + 1] = cum[i] + static_cast<double>(unit_elems[trace[i]]);
  }
  std::vector<bool> live(n, false), persistent(n);
  for (int i = 0; i < n; ++i) {
    persistent[i] = unit_elems[i] <= keep.persistence_threshold;
  }
  const double cap = static_cast<double>(keep.max_live_parameters);
  const double reuse = static_cast<double>(keep.max_reuse_distance);
  double held = 0, peak = 0;
  std::vector<bool> pending(n, false);  // prefetched, in flight
  double in_flight = 0;
  auto take = [&](int v) {
    live[v] = true;
    held += static_cast<double>(unit_elems[v]);
  };
  for (size_t i = 0; i < len; ++i) {
    const int v = trace[i];
    if (!live[v]) {
      if (pending[v]) {
        pending[v] = false;
        in_flight -= static_cast<double>(unit_elems[v]);
        take(v);
      } else if (persistent[v]) {
        for (int w = 0; w < n; ++w) {
          if (persistent[w] && !live[w]) take(w);
        }
      } else {
        take(v);
      }
    }
    for (size_t j = i + 1; j < len; ++j) {
      const int w = trace[j];
      if (persistent[w] || pending[w]) continue;
      if (live[w] || in_flight >= static_cast<double>(keep.prefetch_bucket)) break;
      const double size = static_cast<double>(unit_elems[w]);
      if (held + in_flight + size > cap) break;
      pending[w] = true;
      in_flight += size;
    }
    peak = std::max(peak, held + in_flight);
    if (persistent[v]) continue;
    size_t next = i + 1;
    while (next < len && trace[next] != v) ++next;
    const bool kept =
        next < len && cum[next] - cum[i + 1] < reuse && held <= cap;
    if (!kept) {
      live[v] = false;
      held -= static_cast<double>(unit_elems[v]);
    }
  }
  return peak;
}

absl::StatusOr<ProcessEstimate> EstimateTorchRank(
    const std::vector<uint64_t>& unit_elems, int workers, int stage,
    Precision precision, const TorchZero3Keep& keep) {
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
  // The running unit and the next; more when units are kept.
  const double two =
      std::max(largest + second, SimulatedGatheredPeak(unit_elems, keep));
  const double e = precision == Precision::kFp32 ? 4.0 : 2.0;
  const std::string eb = precision == Precision::kFp32 ? "4" : "2";
  ProcessEstimate r;
  if (stage < 3) {
    r.terms.push_back({"flat parameters (compute dtype)", eb + "Ψ", e * psi});
    r.terms.push_back({"flat gradient (compute dtype)", eb + "Ψ", e * psi});
  } else if (workers == 1) {
    r.terms.push_back({"flat gradient (compute dtype)", eb + "Ψ", e * psi});
    r.terms.push_back({"units gathered (running, prefetched, kept)",
                       eb + "max(U1 + U2, kept)", e * two});
  } else {
    r.terms.push_back({"FP32 gradient partition", "4Ψ/N", 4 * psi / workers});
    r.terms.push_back({"units gathered (running, prefetched, kept)",
                       eb + "max(U1 + U2, kept)", e * two});
    r.terms.push_back({"one unit's FP32 gradient sum", "4U1", 4 * largest});
  }
  r.model_state_terms = static_cast<int>(r.terms.size());
  return r;
}

}  // namespace zeroshard
