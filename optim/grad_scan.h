// The largest gradient magnitude in a slice, read as the server receives it,
// so that no pushed value can make the optimizer's state non-finite
// (docs/DESIGN.md, "Pushed values the servers refuse").
//
// One pass over the bits: |x| of an IEEE value orders as its bits with the
// sign cleared, and every NaN and Inf has the largest such bits, so the
// maximum of (bits & 0x7fff...) says at once whether the slice is finite and,
// when it is, its largest magnitude.
//
//   GradScan s = ScanGrad(GradView::Bf16(p), n);
//   if (!s.finite()) ... FirstNonFinite(GradView::Bf16(p), n) ...
//   else if (s.max_abs() * coefficient > kMaxScaledGrad) ...
//
// ScanGradReference is the specification; ScanGrad dispatches to an AVX-512
// or AVX2 kernel where the CPU has one (tests compare each against the
// reference). Thread-safe; reads the slice unaligned.
#ifndef ZEROSHARD_OPTIM_GRAD_SCAN_H_
#define ZEROSHARD_OPTIM_GRAD_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "optim/optimizer.h"

namespace zeroshard {

// Scaled gradients (coefficient x g) above this magnitude are refused: their
// square, which Adam's second moment accumulates, must stay finite in FP32
// (2^120 is 2^8 below FLT_MAX's 2^128, room for v's running sum).
inline constexpr double kMaxScaledGrad = 1152921504606846976.0;  // 2^60

struct GradScan {
  // The largest |x| as sign-cleared bits of the element type: FP32 bits, or
  // BF16 bits (the high half of the same FP32 value).
  uint32_t max_abs_bits = 0;
  bool bf16 = false;
  // No NaN and no Inf in the slice.
  bool finite() const {
    return max_abs_bits < (bf16 ? 0x7f80u : 0x7f800000u);
  }
  // The largest magnitude; meaningful only when finite().
  float max_abs() const;
};

// The specification: an element-by-element maximum.
GradScan ScanGradReference(GradView grad, size_t n);

// The same through the fastest kernel on this CPU; equal to the reference.
GradScan ScanGrad(GradView grad, size_t n);

// Index of the first NaN or Inf, or n when there is none (the error path:
// scalar).
size_t FirstNonFinite(GradView grad, size_t n);

// Kernels compiled in and usable on this CPU ("avx512", "avx2"), fastest
// first, then "scalar" (the reference); for the tests and the benchmark.
struct GradScanKernel {
  absl::string_view name;
  GradScan (*fn)(GradView grad, size_t n);
};
std::vector<GradScanKernel> AvailableGradScanKernels();

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_GRAD_SCAN_H_
