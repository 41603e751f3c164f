// Bulk FP32 <-> BF16 conversion for activations and GEMM operands.
//
// Same results as common/dtype.h's FloatToBf16 / Bf16ToFloat element by
// element (round to nearest even, NaN kept quiet, denormals kept), but
// vectorised (AVX-512 when available, see avx512.h) and split over the
// OpenMP threads for large arrays.
//
//   std::vector<uint16_t> q(n);
//   FloatsToBf16(x, q.data(), n);
//   Bf16sToFloat(q.data(), x, n);   // x rounded to BF16
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_BF16_CONVERT_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_BF16_CONVERT_H_

#include <cstdint>

namespace zeroshard::kernels::cpu {

void FloatsToBf16(const float* in, uint16_t* out, int64_t n);
void Bf16sToFloat(const uint16_t* in, float* out, int64_t n);
// x[i] = Bf16ToFloat(FloatToBf16(x[i])), in place.
void RoundFloatsThroughBf16(float* x, int64_t n);

// The portable scalar loops the fast paths fall back to (and are tested
// against).
void FloatsToBf16Scalar(const float* in, uint16_t* out, int64_t n);
void Bf16sToFloatScalar(const uint16_t* in, float* out, int64_t n);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_BF16_CONVERT_H_
