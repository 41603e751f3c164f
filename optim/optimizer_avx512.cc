// The AVX-512 Adam kernel (compiled with -mavx512f -mavx512bw -mavx512vl
// -ffp-contract=off): 16 elements per iteration, the tail under a mask. The
// operations and their order are those of AdamUpdateReference, so results
// are bit-identical. The BF16 mirror uses integer round-to-nearest-even, not
// vcvtneps2bf16, which flushes subnormal inputs to zero and so differs from
// FloatToBf16.
#include <immintrin.h>

#include <cstdint>

#include "optim/avx512_lanes.h"
#include "optim/optimizer_kernels.h"

namespace zeroshard {
namespace {

struct Consts {
  __m512 coef, wd, decay, beta1, beta2, omb1, omb2, bc2, eps, nstep;
};

// Updates 16 elements at i (lanes outside `mask` untouched in memory).
template <bool kStreamMirror>
inline void Update16(const Consts& c, bool adamw, bool l2, GradView grad,
                     const AdamSlice& s, size_t i, __mmask16 mask) {
  __m512 g = _mm512_mul_ps(LoadGrad16(grad, i, mask), c.coef);
  __m512 p = _mm512_maskz_loadu_ps(mask, s.master + i);
  if (l2) g = _mm512_fmadd_ps(p, c.wd, g);
  if (adamw) p = _mm512_mul_ps(p, c.decay);
  const __m512 m = _mm512_fmadd_ps(
      g, c.omb1, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s.exp_avg + i), c.beta1));
  const __m512 v = _mm512_fmadd_ps(
      _mm512_mul_ps(c.omb2, g), g,
      _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s.exp_avg_sq + i), c.beta2));
  const __m512 denom =
      _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.bc2), c.eps);
  p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(c.nstep, m), denom));
  _mm512_mask_storeu_ps(s.master + i, mask, p);
  _mm512_mask_storeu_ps(s.exp_avg + i, mask, m);
  _mm512_mask_storeu_ps(s.exp_avg_sq + i, mask, v);
  if (s.mirror != nullptr) {
    if (kStreamMirror) {
      // Full, 32-byte aligned vector: a non-temporal store skips reading
      // the mirror's lines before writing them (write-allocate).
      _mm256_stream_si256(reinterpret_cast<__m256i*>(s.mirror + i),
                          _mm512_cvtepi32_epi16(RoundToBf16x16(p)));
    } else {
      _mm512_mask_cvtepi32_storeu_epi16(s.mirror + i, mask, RoundToBf16x16(p));
    }
  }
}

// Software prefetch this many elements ahead (2 KiB of each FP32 array):
// the divisions and the square root keep the core busy long enough that the
// hardware prefetchers alone leave memory idle between bursts.
constexpr size_t kPrefetchElems = 512;

// Slices from this size on stream the mirror (AdamUpdate's tiles do).
constexpr size_t kStreamMinElems = size_t{1} << 14;

inline void Prefetch(GradView grad, const AdamSlice& s, size_t i) {
  const size_t j = i + kPrefetchElems;
  _mm_prefetch(reinterpret_cast<const char*>(s.master + j), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(s.exp_avg + j), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(s.exp_avg_sq + j), _MM_HINT_T0);
  const size_t elem = grad.bf16 ? sizeof(uint16_t) : sizeof(float);
  _mm_prefetch(static_cast<const char*>(grad.data) + j * elem, _MM_HINT_T0);
}

template <bool kStreamMirror>
void UpdateAll(const Consts& c, bool adamw, bool l2, GradView grad,
               const AdamSlice& slice) {
  const size_t n = slice.n;
  const __mmask16 all = static_cast<__mmask16>(0xFFFF);
  size_t i = 0;
  for (; i + kPrefetchElems + 16 <= n; i += 16) {
    Prefetch(grad, slice, i);
    Update16<kStreamMirror>(c, adamw, l2, grad, slice, i, all);
  }
  for (; i + 16 <= n; i += 16) {
    Update16<kStreamMirror>(c, adamw, l2, grad, slice, i, all);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    Update16<false>(c, adamw, l2, grad, slice, i, tail);
  }
  if (kStreamMirror) _mm_sfence();  // order the streamed stores
}

}  // namespace

void AdamUpdateAvx512(const AdamStep& step, GradView grad,
                      const AdamSlice& slice) {
  const Consts c{_mm512_set1_ps(step.coefficient),
                 _mm512_set1_ps(step.weight_decay),
                 _mm512_set1_ps(step.decay),
                 _mm512_set1_ps(step.beta1),
                 _mm512_set1_ps(step.beta2),
                 _mm512_set1_ps(step.one_minus_beta1),
                 _mm512_set1_ps(step.one_minus_beta2),
                 _mm512_set1_ps(step.bias_correction2_sqrt_f),
                 _mm512_set1_ps(step.eps),
                 _mm512_set1_ps(step.neg_step_size)};
  const bool adamw = step.kind == OptimizerKind::kAdamW;
  const bool l2 = !adamw && step.weight_decay != 0.0f;
  // Only large slices stream the mirror past the caches: a small one may
  // still be in cache when it is served.
  const bool stream = slice.mirror != nullptr && slice.n >= kStreamMinElems &&
                      reinterpret_cast<uintptr_t>(slice.mirror) % 32 == 0;
  if (stream) {
    UpdateAll<true>(c, adamw, l2, grad, slice);
  } else {
    UpdateAll<false>(c, adamw, l2, grad, slice);
  }
}

}  // namespace zeroshard
