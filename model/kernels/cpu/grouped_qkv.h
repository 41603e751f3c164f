// Grouped-query attention's keys and values (Ainslie et al. 2023) on the
// multi-head attention kernel (attention.h): K key/value heads, each shared
// by H / K query heads, as Hugging Face's Llama repeats them (repeat_kv:
// query head h reads key/value head h / (H / K)). K = H is multi-head
// attention, K = 1 multi-query.
//
//   GroupedQkv g{.heads = H, .kv_heads = K, .head_dim = d};
//   RETURN_IF_ERROR(ExpandGroupedQkv(g, qkv_compact, M, qkv));   // [M, 3 H d]
//   ... AttentionForward / AttentionBackward on qkv ...
//   RETURN_IF_ERROR(ReduceGroupedQkvGrad(g, dqkv, M, dqkv_compact));
//
// The compact rows are [q | k | v] with H, K and K heads of d values, the
// output of the stacked q, k and v projections; the expanded rows the
// attention kernel's [q | k | v] of H heads each. The reduction sums each
// key/value head's H / K gradients in head order. FP32.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_GROUPED_QKV_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_GROUPED_QKV_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

struct GroupedQkv {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t compact_width() const { return (heads + 2 * kv_heads) * head_dim; }
  int64_t expanded_width() const { return 3 * heads * head_dim; }
};

// INVALID_ARGUMENT unless every size is positive and kv_heads divides heads.
absl::Status ValidateGroupedQkv(const GroupedQkv& g);

absl::Status ExpandGroupedQkv(const GroupedQkv& g, const float* compact, int64_t m,
                              float* expanded);
absl::Status ReduceGroupedQkvGrad(const GroupedQkv& g, const float* dexpanded,
                                  int64_t m, float* dcompact);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_GROUPED_QKV_H_
