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
void UpdateAll(const AdamLaneConsts& c, GradView grad,
               const AdamSlice& slice) {
  const size_t n = slice.n;
  const __mmask16 all = static_cast<__mmask16>(0xFFFF);
  size_t i = 0;
  for (; i + kPrefetchElems + 16 <= n; i += 16) {
    Prefetch(grad, slice, i);
    AdamUpdate16<kStreamMirror>(c, grad, slice, i, all);
  }
  for (; i + 16 <= n; i += 16) {
    AdamUpdate16<kStreamMirror>(c, grad, slice, i, all);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    AdamUpdate16<false>(c, grad, slice, i, tail);
  }
  if (kStreamMirror) _mm_sfence();  // order the streamed stores
}

}  // namespace

void AdamUpdateAvx512(const AdamStep& step, GradView grad,
                      const AdamSlice& slice) {
  const AdamLaneConsts c = AdamLaneConstsOf(step);
  // Only large slices stream the mirror past the caches: a small one may
  // still be in cache when it is served.
  const bool stream = slice.mirror != nullptr && slice.n >= kStreamMinElems &&
                      reinterpret_cast<uintptr_t>(slice.mirror) % 32 == 0;
  if (stream) {
    UpdateAll<true>(c, grad, slice);
  } else {
    UpdateAll<false>(c, grad, slice);
  }
}

}  // namespace zeroshard
