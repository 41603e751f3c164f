// One Llama decoder block on the CPU (Hugging Face's LlamaDecoderLayer):
//   h1 = RMSNorm(x, g1);  q, k, v = h1 Wq^T, h1 Wk^T, h1 Wv^T
//   q, k = rotary(q), rotary(k);  a = causal attention, K key/value heads
//   shared by H query heads;  x2 = x + a Wo^T
//   h2 = RMSNorm(x2, g2);  x3 = x2 + (silu(h2 Wg^T) * h2 Wu^T) Wd^T
// with nn.Linear weights [out, in] and no biases. The kernels are
// model/kernels/cpu's (rmsnorm.h, rope.h, grouped_qkv.h with the attention
// kernel, swiglu.h); activations are stored in the compute dtype, sums and
// the residual stream's arithmetic in FP32, as GPT-2's block does.
#ifndef ZEROSHARD_MODEL_LLAMA_BLOCK_H_
#define ZEROSHARD_MODEL_LLAMA_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "model/activation_buffer.h"
#include "model/kernels/cpu/rope.h"
#include "model/llama_manifest.h"
#include "model/unit_weights.h"

namespace zeroshard::model {

struct LlamaBlockDims {
  int64_t batch = 0, seq = 0, width = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t mlp_width = 0;
  float norm_eps = 1e-5f;
  DType dtype = DType::kBf16;                 // compute / storage dtype
  const kernels::cpu::RopeTable* rope = nullptr;  // [seq, head_dim / 2]
  int64_t rows() const { return batch * seq; }
};

// The block's dims for a micro-batch of `batch` x `seq` under `dims`, in
// the compute dtype `dtype`, with the rotary table `rope` (the device model
// keeps its own table and passes null).
LlamaBlockDims LlamaBlockDimsOf(const LlamaDims& dims, int64_t batch, int64_t seq,
                                DType dtype, const kernels::cpu::RopeTable* rope);

struct LlamaBlockActs {
  ActBuffer h1, qkv, probs, atty, x2, h2, gu, act;  // compute dtype
  ActBuffer rstd1, rstd2;                      // FP32, [rows]
  bool held() const { return !x2.empty(); }
  void Release();
};

// x_out (allocated here, tracked by mem) = block(x_in); acts receives the
// internals (tracked by mem).
absl::Status LlamaBlockForward(const LlamaBlockDims& d, const UnitWeights& w,
                               const ActBuffer& x_in, ActBuffer* x_out,
                               LlamaBlockActs* acts, ActivationMemory* mem);

// dx_in [rows, width] (written) from dx_out; the unit's FP32 gradients are
// accumulated into grad (indexed by the unit's tensor offsets).
absl::Status LlamaBlockBackward(const LlamaBlockDims& d, const UnitWeights& w,
                                const ActBuffer& x_in, const LlamaBlockActs& acts,
                                const float* dx_out, float* dx_in, float* grad);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_LLAMA_BLOCK_H_
