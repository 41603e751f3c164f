#include "model/kernels/cpu/bf16_convert.h"

#include <algorithm>
#include <cstring>

#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {
namespace {

// Round-to-nearest-even FP32 -> BF16 (NaN kept quiet), branch-free.
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

}  // namespace

void FloatsToBf16Scalar(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToBf16(in[i]);
}

void Bf16sToFloatScalar(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

void FloatsToBf16(const float* in, uint16_t* out, int64_t n) {
  const bool simd = Avx512Available();
  ParallelChunks(n, [&](int64_t b, int64_t e) {
    if (simd) {
      FloatToBf16Avx512(in + b, out + b, e - b);
    } else {
      FloatsToBf16Scalar(in + b, out + b, e - b);
    }
  });
}

void Bf16sToFloat(const uint16_t* in, float* out, int64_t n) {
  const bool simd = Avx512Available();
  ParallelChunks(n, [&](int64_t b, int64_t e) {
    if (simd) {
      Bf16ToFloatAvx512(in + b, out + b, e - b);
    } else {
      Bf16sToFloatScalar(in + b, out + b, e - b);
    }
  });
}

void RoundFloatsThroughBf16(float* x, int64_t n) {
  const bool simd = Avx512Available();
  ParallelChunks(n, [&](int64_t b, int64_t e) {
    uint16_t tmp[256];
    for (int64_t i = b; i < e; i += 256) {
      const int64_t len = std::min<int64_t>(256, e - i);
      if (simd) {
        FloatToBf16Avx512(x + i, tmp, len);
        Bf16ToFloatAvx512(tmp, x + i, len);
      } else {
        FloatsToBf16Scalar(x + i, tmp, len);
        Bf16sToFloatScalar(tmp, x + i, len);
      }
    }
  });
}

}  // namespace zeroshard::kernels::cpu
