// FP32 <-> BF16 on the bit patterns, for the host and a CUDA device.
//
// The one definition of zeroshard's BF16 rounding: round to nearest, ties to
// even; a NaN stays a quiet NaN with its sign; infinities stay infinite.
// common/dtype.h's FloatToBf16 / Bf16ToFloat call these, and the device
// kernels call them too, so host and device round every value identically.
// No absl and no std:: beyond <cstdint>/<cstring>, so nvcc takes the header.
//
//   uint16_t b = zeroshard::FloatToBf16Bits(1.0f);  // 0x3F80
//   float f = zeroshard::Bf16BitsToFloat(b);         // 1.0f
#ifndef ZEROSHARD_COMMON_BF16_BITS_H_
#define ZEROSHARD_COMMON_BF16_BITS_H_

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace zeroshard {

ZS_HOST_DEVICE inline uint32_t F32ToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

ZS_HOST_DEVICE inline float BitsToF32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// Exact: a BF16 value is the top half of an FP32 one.
ZS_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t h) {
  return BitsToF32(static_cast<uint32_t>(h) << 16);
}

ZS_HOST_DEVICE inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u = F32ToBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: keep the sign and the top mantissa bits, force quiet.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_BF16_BITS_H_
