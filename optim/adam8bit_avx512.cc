// The pipelined 8-bit AdamW block (optim/adam8bit_avx512.h). Compiled for
// the baseline CPU with target attributes, as quant8_avx512.cc is;
// adam8bit.cc calls it only where CanRunAdamBlockAvx512.
#include "optim/adam8bit_avx512.h"

#include <algorithm>
#include <limits>

#include "optim/cpu_features.h"
#include "optim/quant8.h"
#include "optim/quant8_code.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "optim/avx512_lanes.h"
#include "optim/quant8_search_avx512.h"

// GCC 12 warns inside its own _mm512_undefined_* (as in optimizer_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define ZS_Q8_ADAM __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#endif

namespace zeroshard {
namespace quant8_internal {

#if defined(__x86_64__)

bool CanRunAdamBlockAvx512() {
  static const bool ok = [] {
    const Quant8Code& m = CodeFor(Quant8Map::kSigned);
    const Quant8Code& v = CodeFor(Quant8Map::kUnsigned);
    return CpuHasAvx512Dq() && !m.buckets.empty() && m.search.ok &&
           !v.buckets.empty() && v.search.ok;
  }();
  return ok;
}

namespace {

ZS_Q8_ADAM inline __mmask16 Lanes(size_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << left) - 1);
}

// Software prefetch of the master and gradient streams this many elements
// ahead, as AdamUpdateAvx512 does.
constexpr size_t kPrefetchElems = 512;

// One array of `prev` to quantize: whether it is searched (a maximum of 0
// gives every code the zero's), the reciprocal of its maximum, and the
// flagged lanes of each 16.
struct Quantizing {
  bool search = false;
  __m512 rcp;
  uint16_t flags[kQuant8Block / 16];
  unsigned any = 0;
};

ZS_Q8_ADAM void Begin(Quantizing& q, const Quant8Code& c, size_t n, float max,
                      uint8_t* codes) {
  if (max == 0.0f) {
    std::fill(codes, codes + n, c.zero);
    return;
  }
  q.search = true;
  q.rcp = _mm512_set1_ps(1.0f / max);
}

// The flagged lanes redone from the bucket table (QuantizeBlockAvx512's
// fix-up).
void FixUp(const Quantizing& q, const Quant8Code& c, const float* x, size_t n,
           float max, uint8_t* codes) {
  if (!q.search || q.any == 0) return;
  for (size_t k = 0; 16 * k < n; ++k) {
    for (unsigned f = q.flags[k]; f != 0; f &= f - 1) {
      const size_t at = 16 * k + static_cast<size_t>(__builtin_ctz(f));
      codes[at] = BucketCode(c, x[at], max);
    }
  }
}

}  // namespace

ZS_Q8_ADAM Q8Maxima AdamBlockAvx512(const AdamStep& step, GradView grad,
                                    const AdamSlice& s, const Q8Block* prev) {
  const Quant8Code& cm = CodeFor(Quant8Map::kSigned);
  const Quant8Code& cv = CodeFor(Quant8Map::kUnsigned);
  const AdamLaneConsts c = AdamLaneConstsOf(step);
  const SearchRegisters tm = SearchRegistersOf(cm);
  const SearchRegisters tv = SearchRegistersOf(cv);
  Quantizing qm, qv;
  const size_t pn = prev != nullptr ? prev->n : 0;
  if (prev != nullptr) {
    Begin(qm, cm, pn, prev->m_max, prev->m_codes);
    Begin(qv, cv, pn, prev->v_max, prev->v_codes);
  }
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  __m512 m_max = _mm512_setzero_ps(), v_max = _mm512_setzero_ps();
  __mmask16 bad = 0;
  const size_t groups = (std::max(s.n, pn) + 15) / 16;
  for (size_t k = 0; k < groups; ++k) {
    const size_t i = 16 * k;
    if (i < s.n) {
      if (i + kPrefetchElems + 16 <= s.n) {
        _mm_prefetch(
            reinterpret_cast<const char*>(s.master + i + kPrefetchElems),
            _MM_HINT_T0);
        const size_t elem = grad.bf16 ? sizeof(uint16_t) : sizeof(float);
        _mm_prefetch(
            static_cast<const char*>(grad.data) + (i + kPrefetchElems) * elem,
            _MM_HINT_T0);
      }
      const __mmask16 mask = Lanes(s.n - i);
      const AdamLanes r = AdamUpdate16<false>(c, grad, s, i, mask);
      const __m512 am = _mm512_abs_ps(r.m), av = _mm512_abs_ps(r.v);
      bad |= _mm512_mask_cmpge_epu32_mask(mask, _mm512_castps_si512(am), inf);
      bad |= _mm512_mask_cmpge_epu32_mask(mask, _mm512_castps_si512(av), inf);
      m_max = _mm512_mask_max_ps(m_max, mask, m_max, am);
      v_max = _mm512_mask_max_ps(v_max, mask, v_max, av);
    }
    if (i < pn) {
      const __mmask16 lanes = Lanes(pn - i);
      if (qm.search) {
        qm.flags[k] = SearchLanes<true>(tm, prev->m + i, lanes, qm.rcp,
                                        prev->m_codes + i);
        qm.any |= qm.flags[k];
      }
      if (qv.search) {
        qv.flags[k] = SearchLanes<false>(tv, prev->v + i, lanes, qv.rcp,
                                         prev->v_codes + i);
        qv.any |= qv.flags[k];
      }
    }
  }
  if (prev != nullptr) {
    FixUp(qm, cm, prev->m, pn, prev->m_max, prev->m_codes);
    FixUp(qv, cv, prev->v, pn, prev->v_max, prev->v_codes);
  }
  if (bad != 0) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    return {nan, nan};
  }
  return {_mm512_reduce_max_ps(m_max), _mm512_reduce_max_ps(v_max)};
}

#else  // !defined(__x86_64__)

bool CanRunAdamBlockAvx512() { return false; }

Q8Maxima AdamBlockAvx512(const AdamStep&, GradView, const AdamSlice&,
                         const Q8Block*) {
  return {};
}

#endif

}  // namespace quant8_internal
}  // namespace zeroshard
