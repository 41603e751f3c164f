// Lion on the servers (optim/lion.h): the scalar reference, the AVX-512
// kernel (compiled through a function attribute, so the file itself targets
// the baseline CPU) and the split of large slices over the optimizer pool.
// Compiled with -ffp-contract=off like the rest of optim/: the only fused
// multiply-adds are the explicit ones, in both paths.
#include "optim/lion.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>


#include "common/dtype.h"
#include "optim/avx512_lanes.h"
#include "optim/cpu_features.h"
#include "optim/optimizer_pool.h"

namespace zeroshard {
namespace {

// As AdamUpdate's: slices up to this run on the caller's thread; larger ones
// in tiles of kLionTileElems.
constexpr size_t kLionParallelThreshold = size_t{1} << 16;
constexpr size_t kLionTileElems = size_t{1} << 15;

}  // namespace

AdamStep MakeLionStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient, double weight_decay,
                      double lr_scale) {
  // The shared constants (lr, betas, decay = float(1 - lr * wd), 1 - beta,
  // the coefficient) as MakeAdamStep rounds them; Lion's step is -lr itself,
  // with no bias correction and no eps.
  AdamStep s = MakeAdamStep(config, t, coefficient, weight_decay, lr_scale);
  const double lr = LearningRateAt(config, std::max<uint64_t>(t, 1)) * lr_scale;
  s.eps = 0;
  s.bias_correction1 = 1;
  s.bias_correction2_sqrt = 1;
  s.bias_correction2_sqrt_f = 1;
  s.neg_step_size = static_cast<float>(-lr);
  return s;
}

void LionUpdateReference(const AdamStep& step, GradView grad,
                         const LionSlice& slice) {
  for (size_t i = 0; i < slice.n; ++i) {
    const float g = grad.At(i) * step.coefficient;
    float p = slice.master[i] * step.decay;
    const float m = slice.exp_avg[i];
    const float c = std::fmaf(g, step.one_minus_beta1, m * step.beta1);
    // torch's sign: (0 < c) - (c < 0); 0 (and NaN) give +0.
    const float sign = static_cast<float>(0.0f < c) - static_cast<float>(c < 0.0f);
    p = std::fmaf(sign, step.neg_step_size, p);
    slice.master[i] = p;
    slice.exp_avg[i] = std::fmaf(g, step.one_minus_beta2, m * step.beta2);
    if (slice.mirror != nullptr) slice.mirror[i] = FloatToBf16(p);
  }
}

#if defined(__x86_64__)

ZS_AVX512_LANES void LionUpdateAvx512(const AdamStep& step, GradView grad,
                                     const LionSlice& s) {
  const __m512 coef = _mm512_set1_ps(step.coefficient);
  const __m512 decay = _mm512_set1_ps(step.decay);
  const __m512 beta1 = _mm512_set1_ps(step.beta1);
  const __m512 beta2 = _mm512_set1_ps(step.beta2);
  const __m512 omb1 = _mm512_set1_ps(step.one_minus_beta1);
  const __m512 omb2 = _mm512_set1_ps(step.one_minus_beta2);
  const __m512 nlr = _mm512_set1_ps(step.neg_step_size);
  const __m512 zero = _mm512_setzero_ps();
  const __m512 one = _mm512_set1_ps(1.0f);
  for (size_t i = 0; i < s.n; i += 16) {
    const size_t left = s.n - i;
    const __mmask16 mask =
        left >= 16 ? static_cast<__mmask16>(0xFFFF)
                   : static_cast<__mmask16>((1u << left) - 1);
    const __m512 g = _mm512_mul_ps(LoadGrad16(grad, i, mask), coef);
    __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s.master + i), decay);
    const __m512 m = _mm512_maskz_loadu_ps(mask, s.exp_avg + i);
    const __m512 c = _mm512_fmadd_ps(g, omb1, _mm512_mul_ps(m, beta1));
    const __mmask16 pos = _mm512_cmp_ps_mask(zero, c, _CMP_LT_OQ);
    const __mmask16 neg = _mm512_cmp_ps_mask(c, zero, _CMP_LT_OQ);
    const __m512 sign = _mm512_sub_ps(_mm512_mask_blend_ps(pos, zero, one),
                                      _mm512_mask_blend_ps(neg, zero, one));
    p = _mm512_fmadd_ps(sign, nlr, p);
    _mm512_mask_storeu_ps(s.master + i, mask, p);
    _mm512_mask_storeu_ps(s.exp_avg + i, mask,
                          _mm512_fmadd_ps(g, omb2, _mm512_mul_ps(m, beta2)));
    if (s.mirror != nullptr) {
      _mm512_mask_cvtepi32_storeu_epi16(s.mirror + i, mask, RoundToBf16x16(p));
    }
  }
}
#else
void LionUpdateAvx512(const AdamStep& step, GradView grad,
                      const LionSlice& slice) {
  LionUpdateReference(step, grad, slice);
}
#endif

namespace {

using LionFn = void (*)(const AdamStep&, GradView, const LionSlice&);

struct LionKernel {
  absl::string_view name;
  LionFn fn;
};

const LionKernel& SelectedLionKernel() {
  static const LionKernel kernel = [] {
    const char* want = std::getenv("ZEROSHARD_OPTIMIZER_KERNEL");
    const bool scalar = want != nullptr && absl::string_view(want) == "scalar";
#if defined(__x86_64__)
    if (!scalar && CpuHasAvx512()) {
      return LionKernel{"avx512", &LionUpdateAvx512};
    }
#endif
    (void)scalar;
    return LionKernel{"scalar", &LionUpdateReference};
  }();
  return kernel;
}

}  // namespace

absl::string_view LionKernelName() { return SelectedLionKernel().name; }

void LionUpdate(const AdamStep& step, GradView grad, const LionSlice& slice) {
  const LionFn fn = SelectedLionKernel().fn;
  if (slice.n <= kLionParallelThreshold) {
    fn(step, grad, slice);
    return;
  }
  const size_t elem = grad.bf16 ? sizeof(uint16_t) : sizeof(float);
  SharedOptimizerPool().ParallelFor(
      slice.n, kLionTileElems, [&](size_t lo, size_t hi) {
        const GradView g{static_cast<const char*>(grad.data) + lo * elem,
                         grad.bf16};
        fn(step, g,
           {slice.master + lo, slice.exp_avg + lo,
            slice.mirror != nullptr ? slice.mirror + lo : nullptr, hi - lo});
      });
}

}  // namespace zeroshard
