// The optimizer step on a slice of the flat space: AdamW / Adam with
// torch.optim semantics, reading the gradient once (FP32 or BF16), scaling it
// by a coefficient, and writing master, m, v and the BF16 mirror in one pass.
//
// AdamUpdateReference is the specification; AdamUpdate dispatches at run time
// to an AVX-512 or AVX2 kernel (or the reference) and splits large slices over
// a thread pool in cache-sized tiles. Both give results within a few ULP of
// each other (the SIMD path may fuse multiply-adds); tests compare them.
//
//   AdamStep step = MakeAdamStep(config, /*t=*/1, /*coefficient=*/0.5f);
//   AdamSlice s{.master = w, .exp_avg = m, .exp_avg_sq = v, .mirror = bf16,
//               .n = n};
//   AdamUpdate(step, GradView::Bf16(g), s);
#ifndef ZEROSHARD_SERVER_OPTIMIZER_H_
#define ZEROSHARD_SERVER_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/optimizer_config.h"

namespace zeroshard {

// Everything one update needs, precomputed once per step in double precision
// and rounded to float the way torch does for fp32 parameters.
struct AdamStep {
  OptimizerKind kind = OptimizerKind::kAdamW;
  float lr = 0;
  float beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  // 1 - beta1^t and sqrt(1 - beta2^t), as torch computes them.
  double bias_correction1 = 1;
  double bias_correction2_sqrt = 1;
  // Multiplier for every gradient element (1/loss_scale * clip factor).
  float coefficient = 1;
};

// Builds the per-step constants for Adam step t >= 1.
AdamStep MakeAdamStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient);

// A read-only gradient: FP32 or BF16 elements.
struct GradView {
  const void* data = nullptr;
  bool bf16 = false;
  static GradView Fp32(const float* p) { return {p, false}; }
  static GradView Bf16(const uint16_t* p) { return {p, true}; }
};

// The state being updated; all arrays hold n elements. mirror may be null.
struct AdamSlice {
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  uint16_t* mirror = nullptr;  // BF16 copy of master, rounded to nearest even
  size_t n = 0;
};

// The scalar reference: the specification.
void AdamUpdateReference(const AdamStep& step, GradView grad,
                         const AdamSlice& slice);

// Which kernel AdamUpdate uses on this CPU: "avx512", "avx2" or "scalar".
absl::string_view AdamKernelName();

// The fast path. Slices above a threshold are split over worker threads
// (ZEROSHARD_OPTIMIZER_THREADS, default: the hardware concurrency).
void AdamUpdate(const AdamStep& step, GradView grad, const AdamSlice& slice);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_OPTIMIZER_H_
