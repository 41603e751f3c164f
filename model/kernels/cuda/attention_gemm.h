// Causal attention on a CUDA device with its four products on cuBLASLt's
// tensor cores: the CPU op's contract and arithmetic (model/kernels/cpu/
// attention.cc: per (batch, head) S = Q K^T, causal softmax rows with the
// 1/sqrt(hd) scale, P saved in the qkv dtype, Y = P V; backward dP = dY V^T,
// dV = P^T dY, dS = P (dP - rowsum(dP P)) scale, dQ = dS K, dK = dS^T Q,
// with dY and dS rounded to BF16 for the products when qkv is BF16).
//
// The per-head products are one strided-batched cuBLASLt call per sequence
// of the batch (the heads are the batch: Q, K, V are read in place from qkv
// [B, T, 3C] with leading dimension 3C and head stride hd); the softmax rows
// are one block each. Scratch: FP32 scores of one sequence [H, T, T], the
// BF16 dY [B, T, C] and dS [H, T, T].
//
//   GemmAttention attn(gemm);
//   RETURN_IF_ERROR(attn.Forward(shape, qkv, probs, y, stream));
//   RETURN_IF_ERROR(attn.Backward(shape, qkv, probs, dy, dqkv, stream));
//
// model/kernels/cuda/attention.h is the plain row-per-block kernel, kept
// as a second device implementation to compare against; a fused
// (online-softmax) kernel would drop the saved P.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_ATTENTION_GEMM_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_ATTENTION_GEMM_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "model/kernels/attention_shape.h"
#include "common/device_scratch.h"
#include "model/kernels/cuda/gemm.h"

namespace zeroshard::kernels::cuda {

class GemmAttention {
 public:
  explicit GemmAttention(CublasLtGemm* gemm) : gemm_(gemm) {}

  // y [B*T, C] FP32 written; probs [B, H, T, T] in s.dtype written (zeros
  // above the diagonal).
  absl::Status Forward(const AttentionShape& s, const void* qkv, void* probs,
                       float* y, cudaStream_t stream);
  // dqkv [B*T, 3C] FP32 written.
  absl::Status Backward(const AttentionShape& s, const void* qkv,
                        const void* probs, const float* dy, float* dqkv,
                        cudaStream_t stream);

 private:
  CublasLtGemm* gemm_;
  DeviceScratch scores_, dy_bf16_, ds_;
};

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_ATTENTION_GEMM_H_
