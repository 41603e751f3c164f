// One pre-LayerNorm GPT-2 block, forward and backward, on resolved weights:
//   x2    = x + c_proj(attn(ln_1(x)))
//   x_out = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))
//
//   BlockActs acts;
//   RETURN_IF_ERROR(BlockForward(dims, w, x_in, &x_out, &acts, &mem));
//   RETURN_IF_ERROR(BlockBackward(dims, w, x_in, acts, dx_out, dx_in, grad));
//
// Storage: x_in, x_out and the saved internals are in the compute dtype
// (BF16 for BF16 training); every stored value is used in its stored
// (rounded) form by both the forward and the backward, so recomputing a
// block reproduces the same bits. Gradients flowing between blocks are FP32.
// Tensor order within the unit is model/gpt_manifest.h's.
#ifndef ZEROSHARD_MODEL_GPT_BLOCK_H_
#define ZEROSHARD_MODEL_GPT_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "model/activation_buffer.h"
#include "model/unit_weights.h"

namespace zeroshard::model {

struct BlockDims {
  int64_t batch = 0, seq = 0, width = 0, heads = 0;
  DType dtype = DType::kBf16;  // compute / storage dtype (kBf16 or kFp32)
  int64_t rows() const { return batch * seq; }
};

// A block's internal activations, saved by the forward for the backward.
struct BlockActs {
  ActBuffer ln1, qkv, probs, atty, x2, ln2, h;  // compute dtype
  ActBuffer mean1, rstd1, mean2, rstd2;         // FP32, [rows]
  bool held() const { return !x2.empty(); }
  void Release();
};

// x_out (allocated here, tracked by mem) = block(x_in). acts receives the
// internals (tracked by mem); callers drop them when the policy says so.
absl::Status BlockForward(const BlockDims& d, const UnitWeights& w,
                          const ActBuffer& x_in, ActBuffer* x_out,
                          BlockActs* acts, ActivationMemory* mem);

// dx_in [rows, width] (written) from dx_out; the unit's FP32 gradients are
// accumulated into grad (indexed by the unit's tensor offsets).
absl::Status BlockBackward(const BlockDims& d, const UnitWeights& w,
                           const ActBuffer& x_in, const BlockActs& acts,
                           const float* dx_out, float* dx_in, float* grad);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_GPT_BLOCK_H_
