// Scalar conversions between FP32, BF16 and FP16, and wire dtype helpers.
//
// Every narrowing conversion rounds to nearest, ties to even. NaN stays NaN
// (quiet), infinities stay infinite, FP16 subnormals are produced and read
// exactly. These scalar functions are the reference that the SIMD and CUDA
// paths are tested against.
//
//   uint16_t b = zeroshard::FloatToBf16(1.0f);   // 0x3F80
//   float f = zeroshard::Bf16ToFloat(b);         // 1.0f
#ifndef ZEROSHARD_COMMON_DTYPE_H_
#define ZEROSHARD_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/bf16_bits.h"

namespace zeroshard {

// Element types on the wire and in memory. Values match zeroshard.v1.DType.
enum class DType : int { kUnspecified = 0, kFp32 = 1, kBf16 = 2, kFp16 = 3 };

// Bytes per element; 0 for kUnspecified.
size_t DTypeSize(DType dtype);
// "fp32", "bf16", "fp16" or "unspecified".
absl::string_view DTypeName(DType dtype);
// Parses "fp32" / "bf16" / "fp16" (also "float32", "bfloat16", "float16").
absl::StatusOr<DType> ParseDType(absl::string_view name);

inline uint32_t FloatBits(float f) { return F32ToBits(f); }
inline float BitsToFloat(uint32_t u) { return BitsToF32(u); }

// The rounding itself is common/bf16_bits.h's, shared with the device kernels.
inline float Bf16ToFloat(uint16_t h) { return Bf16BitsToFloat(h); }
inline uint16_t FloatToBf16(float f) { return FloatToBf16Bits(f); }

// IEEE binary16 -> binary32, exact.
float Fp16ToFloat(uint16_t h);
// binary32 -> binary16, round to nearest even; overflow gives +-Inf.
uint16_t FloatToFp16(float f);

// Array conversions (scalar reference loops).
void Bf16ToFloatArray(const uint16_t* in, float* out, size_t n);
void FloatToBf16Array(const float* in, uint16_t* out, size_t n);
void Fp16ToFloatArray(const uint16_t* in, float* out, size_t n);
void FloatToFp16Array(const float* in, uint16_t* out, size_t n);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_DTYPE_H_
