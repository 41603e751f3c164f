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

namespace zeroshard {

// Element types on the wire and in memory. Values match zeroshard.v1.DType.
enum class DType : int { kUnspecified = 0, kFp32 = 1, kBf16 = 2, kFp16 = 3 };

// Bytes per element; 0 for kUnspecified.
size_t DTypeSize(DType dtype);
// "fp32", "bf16", "fp16" or "unspecified".
absl::string_view DTypeName(DType dtype);
// Parses "fp32" / "bf16" / "fp16" (also "float32", "bfloat16", "float16").
absl::StatusOr<DType> ParseDType(absl::string_view name);

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Bf16ToFloat(uint16_t h) {
  return BitsToFloat(static_cast<uint32_t>(h) << 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep the sign and the top mantissa bits, force quiet.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

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
