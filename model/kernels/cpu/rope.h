// Rotary position embeddings (Su et al. 2021) in the half-split layout of
// Hugging Face's Llama: a head's dims [0, d/2) and [d/2, d) are the two
// halves of each rotated pair,
//   y1 = x1 cos - x2 sin,   y2 = x2 cos + x1 sin   (rotate_half),
// with angle p * inv_freq[i] at position p, inv_freq[i] = theta^(-2i/d).
// The table holds cos and sin as Hugging Face's rotary embedding computes
// them in FP32: inv_freq and p * inv_freq rounded to float, then cos, sin.
//
//   ASSIGN_OR_RETURN(RopeTable t, RopeTable::Make(/*seq=*/T, /*head_dim=*/d, 10000.0));
//   RETURN_IF_ERROR(RopeForward(t, x, M, heads, row_stride));   // in place
//   RETURN_IF_ERROR(RopeBackward(t, dx, M, heads, row_stride));  // in place
//
// x holds M = batch * seq rows, position = row % seq; each row's first
// `heads` heads of d values are rotated, the rest of the row (row_stride
// values in all) untouched. FP32. The backward applies the transposed
// rotation to the gradient. *Reference versions compute cos and sin and the
// rotation in double.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_ROPE_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard::kernels::cpu {

struct RopeTable {
  int64_t seq = 0, head_dim = 0;
  double theta = 10000;
  std::vector<float> cos, sin;  // [seq, head_dim / 2]

  // INVALID_ARGUMENT for seq < 1, an odd or non-positive head_dim, or theta
  // not > 1 and finite.
  static absl::StatusOr<RopeTable> Make(int64_t seq, int64_t head_dim, double theta);
};

absl::Status RopeForward(const RopeTable& t, float* x, int64_t m, int64_t heads,
                         int64_t row_stride);
absl::Status RopeBackward(const RopeTable& t, float* dx, int64_t m, int64_t heads,
                          int64_t row_stride);

absl::Status RopeForwardReference(const RopeTable& t, float* x, int64_t m,
                                  int64_t heads, int64_t row_stride);
absl::Status RopeBackwardReference(const RopeTable& t, float* dx, int64_t m,
                                   int64_t heads, int64_t row_stride);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_ROPE_H_
