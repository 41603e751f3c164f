#include "optim/grad_scan.h"

#include <algorithm>
#include <cstring>

#include "optim/cpu_features.h"

#if defined(__x86_64__)
// GCC 12 flags the deliberately undefined vectors inside its own AVX-512
// intrinsics (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace zeroshard {
namespace {

constexpr uint32_t kAbs32 = 0x7fffffffu;
constexpr uint16_t kAbs16 = 0x7fffu;

uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint16_t Load16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The scalar tail the kernels share: elements [i, n).
uint32_t TailMax(GradView grad, size_t i, size_t n, uint32_t m) {
  const char* p = static_cast<const char*>(grad.data);
  if (grad.bf16) {
    for (; i < n; ++i) m = std::max<uint32_t>(m, Load16(p + 2 * i) & kAbs16);
  } else {
    for (; i < n; ++i) m = std::max(m, Load32(p + 4 * i) & kAbs32);
  }
  return m;
}

#if defined(__x86_64__)
// Compiled for the ISA through function attributes, so that the library
// itself still targets the baseline CPU; called only when the CPU has it.
// (A lambda would not inherit the attribute: the loads are functions.)
#define ZS_AVX2 __attribute__((target("avx2")))
#define ZS_AVX512 __attribute__((target("avx512f,avx512bw")))

ZS_AVX2 inline __m256i Abs256(const char* p, __m256i mask) {
  return _mm256_and_si256(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), mask);
}
ZS_AVX512 inline __m512i Abs512(const char* p, __m512i mask) {
  return _mm512_and_si512(_mm512_loadu_si512(p), mask);
}

ZS_AVX2 GradScan ScanAvx2(GradView grad, size_t n) {
  const char* p = static_cast<const char*>(grad.data);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  uint32_t m = 0;
  if (grad.bf16) {
    const __m256i mask = _mm256_set1_epi16(static_cast<short>(kAbs16));
#define at(k) Abs256(p + 2 * (k), mask)
    for (; i + 64 <= n; i += 64) {
      a0 = _mm256_max_epu16(a0, at(i));
      a1 = _mm256_max_epu16(a1, at(i + 16));
      a2 = _mm256_max_epu16(a2, at(i + 32));
      a3 = _mm256_max_epu16(a3, at(i + 48));
    }
    for (; i + 16 <= n; i += 16) a0 = _mm256_max_epu16(a0, at(i));
    a0 = _mm256_max_epu16(_mm256_max_epu16(a0, a1), _mm256_max_epu16(a2, a3));
    alignas(32) uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
    for (uint16_t v : lanes) m = std::max<uint32_t>(m, v);
#undef at
  } else {
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(kAbs32));
#define at(k) Abs256(p + 4 * (k), mask)
    for (; i + 32 <= n; i += 32) {
      a0 = _mm256_max_epu32(a0, at(i));
      a1 = _mm256_max_epu32(a1, at(i + 8));
      a2 = _mm256_max_epu32(a2, at(i + 16));
      a3 = _mm256_max_epu32(a3, at(i + 24));
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_max_epu32(a0, at(i));
    a0 = _mm256_max_epu32(_mm256_max_epu32(a0, a1), _mm256_max_epu32(a2, a3));
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
    for (uint32_t v : lanes) m = std::max(m, v);
#undef at
  }
  return {TailMax(grad, i, n, m), grad.bf16};
}

ZS_AVX512 GradScan ScanAvx512(GradView grad, size_t n) {
  const char* p = static_cast<const char*>(grad.data);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  uint32_t m = 0;
  if (grad.bf16) {
    const __m512i mask = _mm512_set1_epi16(static_cast<short>(kAbs16));
#define at(k) Abs512(p + 2 * (k), mask)
    for (; i + 128 <= n; i += 128) {
      a0 = _mm512_max_epu16(a0, at(i));
      a1 = _mm512_max_epu16(a1, at(i + 32));
      a2 = _mm512_max_epu16(a2, at(i + 64));
      a3 = _mm512_max_epu16(a3, at(i + 96));
    }
    for (; i + 32 <= n; i += 32) a0 = _mm512_max_epu16(a0, at(i));
    a0 = _mm512_max_epu16(_mm512_max_epu16(a0, a1), _mm512_max_epu16(a2, a3));
    alignas(64) uint16_t lanes[32];
    _mm512_store_si512(lanes, a0);
    for (uint16_t v : lanes) m = std::max<uint32_t>(m, v);
#undef at
  } else {
    const __m512i mask = _mm512_set1_epi32(static_cast<int>(kAbs32));
#define at(k) Abs512(p + 4 * (k), mask)
    for (; i + 64 <= n; i += 64) {
      a0 = _mm512_max_epu32(a0, at(i));
      a1 = _mm512_max_epu32(a1, at(i + 16));
      a2 = _mm512_max_epu32(a2, at(i + 32));
      a3 = _mm512_max_epu32(a3, at(i + 48));
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_max_epu32(a0, at(i));
    a0 = _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3));
    m = _mm512_reduce_max_epu32(a0);
#undef at
  }
  return {TailMax(grad, i, n, m), grad.bf16};
}

#endif

}  // namespace

float GradScan::max_abs() const {
  const uint32_t bits = bf16 ? max_abs_bits << 16 : max_abs_bits;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

GradScan ScanGradReference(GradView grad, size_t n) {
  return {TailMax(grad, 0, n, 0), grad.bf16};
}

std::vector<GradScanKernel> AvailableGradScanKernels() {
  std::vector<GradScanKernel> kernels;
#if defined(__x86_64__)
  if (CpuHasAvx512()) kernels.push_back({"avx512", &ScanAvx512});
  if (CpuHasAvx2Fma()) kernels.push_back({"avx2", &ScanAvx2});
#endif
  kernels.push_back({"scalar", &ScanGradReference});
  return kernels;
}

GradScan ScanGrad(GradView grad, size_t n) {
  static const auto fn = AvailableGradScanKernels().front().fn;
  return fn(grad, n);
}

size_t FirstNonFinite(GradView grad, size_t n) {
  const char* p = static_cast<const char*>(grad.data);
  for (size_t i = 0; i < n; ++i) {
    const bool bad = grad.bf16
                         ? (Load16(p + 2 * i) & 0x7f80u) == 0x7f80u
                         : (Load32(p + 4 * i) & 0x7f800000u) == 0x7f800000u;
    if (bad) return i;
  }
  return n;
}

}  // namespace zeroshard
