#include "model/kernels/cpu/grouped_qkv.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {

absl::Status ValidateGroupedQkv(const GroupedQkv& g) {
  if (g.heads <= 0 || g.kv_heads <= 0 || g.head_dim <= 0 || g.heads % g.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grouped attention: ", g.heads, " query heads, ", g.kv_heads,
        " key/value heads (which must divide them) of ", g.head_dim));
  }
  return absl::OkStatus();
}

absl::Status ExpandGroupedQkv(const GroupedQkv& g, const float* compact, int64_t m,
                              float* expanded) {
  if (absl::Status s = ValidateGroupedQkv(g); !s.ok()) return s;
  if (m <= 0) return absl::InvalidArgumentError("grouped attention: no rows");
  const int64_t d = g.head_dim, h = g.heads, k = g.kv_heads, rep = h / k;
  const int64_t cw = g.compact_width(), ew = g.expanded_width();
  const size_t head_bytes = static_cast<size_t>(d) * sizeof(float);
#pragma omp parallel for schedule(static) if (ParallelWorth(m * ew))
  for (int64_t r = 0; r < m; ++r) {
    const float* in = compact + r * cw;
    float* out = expanded + r * ew;
    std::memcpy(out, in, static_cast<size_t>(h) * head_bytes);  // q
    for (int64_t q = 0; q < h; ++q) {
      const int64_t kv = q / rep;
      std::memcpy(out + (h + q) * d, in + (h + kv) * d, head_bytes);
      std::memcpy(out + (2 * h + q) * d, in + (h + k + kv) * d, head_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status ReduceGroupedQkvGrad(const GroupedQkv& g, const float* dexpanded,
                                  int64_t m, float* dcompact) {
  if (absl::Status s = ValidateGroupedQkv(g); !s.ok()) return s;
  if (m <= 0) return absl::InvalidArgumentError("grouped attention: no rows");
  const int64_t d = g.head_dim, h = g.heads, k = g.kv_heads, rep = h / k;
  const int64_t cw = g.compact_width(), ew = g.expanded_width();
#pragma omp parallel for schedule(static) if (ParallelWorth(m * ew))
  for (int64_t r = 0; r < m; ++r) {
    const float* in = dexpanded + r * ew;
    float* out = dcompact + r * cw;
    std::memcpy(out, in, static_cast<size_t>(h * d) * sizeof(float));  // dq
    for (int64_t part = 1; part <= 2; ++part) {  // dk, then dv
      for (int64_t kv = 0; kv < k; ++kv) {
        float* o = out + (h + (part - 1) * k + kv) * d;
        const float* first = in + (part * h + kv * rep) * d;
        std::memcpy(o, first, static_cast<size_t>(d) * sizeof(float));
        for (int64_t j = 1; j < rep; ++j) {
          const float* src = first + j * d;
          for (int64_t e = 0; e < d; ++e) o[e] += src[e];
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
