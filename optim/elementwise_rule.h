// The update of a registered element-wise rule (common/optimizer_rules.h)
// from one function per element, written once for both of its kernels: a
// rule's file gives its name, the step's constants and Element<F>, a
// template over the lane type F (float for the scalar reference, Lanes16
// for the AVX-512 kernel), and ElementwiseRule<Rule> is its UpdateRule. The
// two kernels run the same operations in the same order on IEEE single
// precision (products, sums, fused multiply-adds, divisions and square
// roots correctly rounded), so they agree bit for bit; tests compare them
// for every registered rule (UpdateRule::UpdateReference).
//
//   struct Sgd {
//     static constexpr char kName[] = "sgd";
//     static AdamStep MakeStep(const OptimizerConfig&, uint64_t t,
//                              float coefficient, double wd, double lr_scale);
//     ZS_RULE_ELEMENT void Element(const AdamStep& s, F g, F& p, F* state);
//   };
//   const UpdateRule& SgdRule() { return ElementwiseRuleOf<Sgd>(); }
//
// The step's constants travel in AdamStep: coefficient, lr, weight_decay,
// eps, t, and the rule's own in `rule` (each rule's file says which). A
// rule's state is one FP32 slot or more, in its description's order;
// Element reads and writes state[k] for slot k.
#ifndef ZEROSHARD_OPTIM_ELEMENTWISE_RULE_H_
#define ZEROSHARD_OPTIM_ELEMENTWISE_RULE_H_

#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/optimizer_config.h"
#include "common/optimizer_rules.h"
#include "optim/avx512_lanes.h"
#include "optim/cpu_features.h"
#include "optim/optimizer_pool.h"
#include "optim/update_rule.h"

namespace zeroshard {

// A rule's Element is always inlined: the AVX-512 kernel, compiled through
// a target attribute, flattens it and the lane operations into itself, so
// no __m512 crosses a call between code built for different targets (see
// optim/avx512_lanes.h). Write `ZS_RULE_ELEMENT void Element(...)` inside
// the rule's struct.
#define ZS_RULE_ELEMENT template <typename F> __attribute__((always_inline)) static inline

// The lane operations are local to each file that includes this header
// (one unnamed namespace holds both lanes' overloads, so that a rule's
// file, whose own helpers sit in its unnamed namespace, sees both).
namespace {
// The scalar lane: the reference's arithmetic.
inline float Fma(float a, float b, float c) { return std::fmaf(a, b, c); }
inline float Sqrt(float a) { return std::sqrt(a); }
}  // namespace

// A constant of the step in lane type F.
template <typename F>
inline F Splat(float x) {
  return x;
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// Sixteen FP32 lanes; each operation one instruction, correctly rounded as
// its scalar counterpart, called only from the AVX-512 kernel (which
// flattens them into itself).
namespace {
struct Lanes16 {
  __m512 v;
};
ZS_AVX512_LANES inline Lanes16 operator+(Lanes16 a, Lanes16 b) {
  return {_mm512_add_ps(a.v, b.v)};
}
ZS_AVX512_LANES inline Lanes16 operator-(Lanes16 a, Lanes16 b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
ZS_AVX512_LANES inline Lanes16 operator*(Lanes16 a, Lanes16 b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
ZS_AVX512_LANES inline Lanes16 operator/(Lanes16 a, Lanes16 b) {
  return {_mm512_div_ps(a.v, b.v)};
}
ZS_AVX512_LANES inline Lanes16 Fma(Lanes16 a, Lanes16 b, Lanes16 c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
ZS_AVX512_LANES inline Lanes16 Sqrt(Lanes16 a) { return {_mm512_sqrt_ps(a.v)}; }
}  // namespace
template <>
ZS_AVX512_LANES inline Lanes16 Splat<Lanes16>(float x) {
  return {_mm512_set1_ps(x)};
}
#pragma GCC diagnostic pop
#endif

template <typename Rule>
class ElementwiseRule final : public UpdateRule {
 public:
  absl::string_view name() const override { return Rule::kName; }
  absl::Span<const StateSlot> slots() const override {
    return OptimizerStateSlots(OptimizerKind::kRule, Rule::kName);
  }
  AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                    float coefficient, double weight_decay,
                    double lr_scale) const override {
    return Rule::MakeStep(config, t, coefficient, weight_decay, lr_scale);
  }
  absl::Status Update(const AdamStep& step, GradView grad,
                      const StateSlice& slice) const override {
    const Kernel fn = Selected().fn;
    if (slice.n <= kParallelThreshold) {
      fn(step, grad, slice);
      return absl::OkStatus();
    }
    const size_t elem = grad.bf16 ? sizeof(uint16_t) : sizeof(float);
    SharedOptimizerPool().ParallelFor(
        slice.n, kTileElems, [&](size_t lo, size_t hi) {
          const GradView g{static_cast<const char*>(grad.data) + lo * elem,
                           grad.bf16};
          fn(step, g, Offset(slice, lo, hi - lo));
        });
    return absl::OkStatus();
  }
  absl::Status UpdateReference(const AdamStep& step, GradView grad,
                               const StateSlice& slice) const override {
    Reference(step, grad, slice);
    return absl::OkStatus();
  }
  absl::Status UpdateOnDevice(const AdamStep& step, GradView grad,
                              const StateSlice& slice,
                              void* cuda_stream) const override {
    (void)step, (void)grad, (void)slice, (void)cuda_stream;
    return absl::UnimplementedError(absl::StrCat(
        "the ", Rule::kName,
        " rule has no device kernel: use placement host or pinned"));
  }
  bool HasDeviceUpdate() const override { return false; }
  absl::string_view KernelName() const override { return Selected().name; }

 private:
  // As AdamUpdate's: slices up to this run on the caller's thread.
  static constexpr size_t kParallelThreshold = size_t{1} << 16;
  static constexpr size_t kTileElems = size_t{1} << 15;
  static constexpr size_t kMaxSlots = kMaxStateSlots;

  using Kernel = void (*)(const AdamStep&, GradView, const StateSlice&);
  struct Selection {
    absl::string_view name;
    Kernel fn;
  };

  static StateSlice Offset(const StateSlice& s, size_t lo, size_t n) {
    StateSlice out = s;
    out.master += lo;
    for (float*& slot : out.slots) {
      if (slot != nullptr) slot += lo;
    }
    if (out.mirror != nullptr) out.mirror += lo;
    out.n = n;
    return out;
  }

  static size_t NumSlots() {
    return OptimizerStateSlots(OptimizerKind::kRule, Rule::kName).size();
  }

  static void Reference(const AdamStep& step, GradView grad,
                        const StateSlice& s) {
    const size_t slots = NumSlots();
    for (size_t i = 0; i < s.n; ++i) {
      float state[kMaxSlots];
      for (size_t k = 0; k < slots; ++k) state[k] = s.slots[k][i];
      float p = s.master[i];
      Rule::template Element<float>(step, grad.At(i), p, state);
      s.master[i] = p;
      for (size_t k = 0; k < slots; ++k) s.slots[k][i] = state[k];
      if (s.mirror != nullptr) s.mirror[i] = FloatToBf16(p);
    }
  }

#if defined(__x86_64__)
// GCC 12 warns inside its own _mm512_undefined_* (as in optimizer_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
  __attribute__((target("avx512f,avx512bw,avx512vl"), flatten)) static void
  Avx512(const AdamStep& step, GradView grad,
                                     const StateSlice& s) {
    const size_t slots = NumSlots();
    for (size_t i = 0; i < s.n; i += 16) {
      const size_t left = s.n - i;
      const __mmask16 mask = left >= 16
                                 ? static_cast<__mmask16>(0xFFFF)
                                 : static_cast<__mmask16>((1u << left) - 1);
      Lanes16 state[kMaxSlots];
      for (size_t k = 0; k < slots; ++k) {
        state[k].v = _mm512_maskz_loadu_ps(mask, s.slots[k] + i);
      }
      Lanes16 p{_mm512_maskz_loadu_ps(mask, s.master + i)};
      Rule::template Element<Lanes16>(step, Lanes16{LoadGrad16(grad, i, mask)},
                                      p, state);
      _mm512_mask_storeu_ps(s.master + i, mask, p.v);
      for (size_t k = 0; k < slots; ++k) {
        _mm512_mask_storeu_ps(s.slots[k] + i, mask, state[k].v);
      }
      if (s.mirror != nullptr) {
        _mm512_mask_cvtepi32_storeu_epi16(s.mirror + i, mask,
                                          RoundToBf16x16(p.v));
      }
    }
  }
#pragma GCC diagnostic pop
#endif

  // The AVX-512 kernel where the CPU has it, unless
  // ZEROSHARD_OPTIMIZER_KERNEL=scalar (as for AdamW and Lion).
  static const Selection& Selected() {
    static const Selection selection = [] {
      const char* want = std::getenv("ZEROSHARD_OPTIMIZER_KERNEL");
      const bool scalar =
          want != nullptr && absl::string_view(want) == "scalar";
#if defined(__x86_64__)
      if (!scalar && CpuHasAvx512()) return Selection{"avx512", &Avx512};
#endif
      (void)scalar;
      return Selection{"scalar", &Reference};
    }();
    return selection;
  }
};

// The rule's one instance (lives for the process).
template <typename Rule>
const UpdateRule& ElementwiseRuleOf() {
  static const ElementwiseRule<Rule>* const rule = new ElementwiseRule<Rule>();
  return *rule;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ELEMENTWISE_RULE_H_
