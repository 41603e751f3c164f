#include "common/init_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/hash.h"

namespace zeroshard {

float CounterNormal(uint64_t seed, uint64_t index) {
  const uint64_t a = SplitMix64(seed ^ SplitMix64(2 * index));
  const uint64_t b = SplitMix64(seed ^ SplitMix64(2 * index + 1));
  // Uniforms in (0, 1]: 53 random bits.
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                            std::cos(2.0 * M_PI * u2));
}

void FillInitialValues(const FlatLayout& layout, uint64_t seed, double std,
                       FlatRange range, float* out) {
  std::memset(out, 0, range.size() * sizeof(float));
  for (const TensorInfo& t : layout.tensors()) {
    const FlatRange tr{t.offset, t.offset + t.numel};
    const FlatRange piece = Intersect(tr, range);
    if (piece.empty()) continue;
    float* dst = out + (piece.begin - range.begin);
    if (t.init.kind == InitRule::Kind::kZeros) continue;
    if (t.init.kind == InitRule::Kind::kOnes) {
      std::fill(dst, dst + piece.size(), 1.0f);
      continue;
    }
    const double s = std / t.init.std_divisor;
    // Seeded by (tensor index, offset inside the tensor), not by the flat
    // offset, so that the weights do not depend on the unit padding (which
    // depends on the worker count).
    const uint64_t tensor_seed =
        SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(&t - &layout.tensors()[0])));
    for (uint64_t i = piece.begin; i < piece.end; ++i) {
      dst[i - piece.begin] =
          static_cast<float>(s * CounterNormal(tensor_seed, i - t.offset));
    }
  }
}

}  // namespace zeroshard
