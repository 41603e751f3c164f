// One Llama decoder block on a CUDA device: the same computation, in the
// same order and with the same roundings, as model/llama_block.h (read that
// file's comment first), on device memory and the CUDA kernels
// (model/kernels/cuda/llama_ops.h, the attention of device_block.h, cuBLASLt
// products).
//
//   DeviceLlamaBlockRunner runner(gemm, stream, DeviceAttention::kFlash);
//   DeviceLlamaActs acts;
//   RETURN_IF_ERROR(runner.Forward(dims, rope, w, x_in, &x_out, &acts, &mem));
//   RETURN_IF_ERROR(runner.Backward(dims, rope, w, x_in, acts, dx_out, dx_in,
//                                   grad));
//
// Everything is enqueued on the runner's stream; pointers are device
// memory. Not thread-safe (one runner per model). Not yet run on a device
// (docs/GPU.md).
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_LLAMA_BLOCK_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_LLAMA_BLOCK_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/device_scratch.h"
#include "model/cuda/device_block.h"
#include "model/cuda/device_buffer.h"
#include "model/kernels/cuda/attention_gemm.h"
#include "model/kernels/cuda/flash_attention.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/op_timer.h"
#include "model/llama_block.h"

namespace zeroshard::model {

// The rotary table of one sequence length on the device: cos and sin,
// [seq, head_dim / 2] each (kernels::cpu::RopeTable's values).
struct DeviceRope {
  int64_t seq = 0, head_dim = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// A block's saved internals on the device (llama_block.h's LlamaBlockActs).
struct DeviceLlamaActs {
  DeviceBuffer h1, qkv, probs, atty, x2, h2, gu, act;  // compute dtype
  DeviceBuffer rstd1, rstd2;                           // FP32, [rows]
  DeviceBuffer lse;  // FP32 [batch, heads, seq], kOnline and kFlash only
  bool held() const { return !x2.empty(); }
  void Release();
};

class DeviceLlamaBlockRunner {
 public:
  DeviceLlamaBlockRunner(kernels::cuda::CublasLtGemm* gemm, cudaStream_t stream,
                         DeviceAttention attention = DeviceAttention::kProbs)
      : gemm_(gemm), stream_(stream), attention_kind_(attention), attention_(gemm) {}

  // `d.rope` is not read: the table is `rope`'s.
  absl::Status Forward(const LlamaBlockDims& d, const DeviceRope& rope,
                       const DeviceUnitWeights& w, const DeviceBuffer& x_in,
                       DeviceBuffer* x_out, DeviceLlamaActs* acts,
                       ActivationMemory* mem);
  // dx_in [rows, width] written from dx_out (both FP32, device); the unit's
  // gradients accumulated into grad (device FP32, the unit's offsets).
  absl::Status Backward(const LlamaBlockDims& d, const DeviceRope& rope,
                        const DeviceUnitWeights& w, const DeviceBuffer& x_in,
                        const DeviceLlamaActs& acts, const float* dx_out,
                        float* dx_in, float* grad);

  int64_t scratch_bytes() const;
  void set_timer(kernels::cuda::OpTimer* timer) { timer_ = timer; }

 private:
  void Mark(const char* label) const { kernels::cuda::MarkOp(timer_, label); }
  absl::StatusOr<float*> Scratch(int slot, int64_t n);
  // y[m, out] (row stride ldy) (+)= x[m, in] W^T, W an nn.Linear weight
  // [out, in] in the compute dtype.
  absl::Status Project(kernels::cuda::DeviceTensor x, int64_t in,
                       kernels::cuda::DeviceTensor w, int64_t out, int64_t m,
                       float* y, int64_t ldy, bool accumulate = false);
  // Its backward, as llama_block.cc's: dx[m, in] (+)= dy W and dW += dy^T x,
  // dy [m, out] at column `col` of an FP32 matrix of row stride ldy, rounded
  // to BF16 once for both products against BF16 operands.
  absl::Status ProjectBackward(const float* dy, int64_t ldy, int64_t col,
                               kernels::cuda::DeviceTensor x, int64_t in,
                               kernels::cuda::DeviceTensor w, int64_t out,
                               int64_t m, float* dx, bool accumulate_dx,
                               float* dw);

  kernels::cuda::CublasLtGemm* gemm_;
  cudaStream_t stream_;
  DeviceAttention attention_kind_;
  DeviceScratch dy_bf16_;
  DeviceScratch scratch_[9];
  kernels::cuda::GemmAttention attention_;
  kernels::cuda::FlashAttention flash_;
  kernels::cuda::OpTimer* timer_ = nullptr;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_LLAMA_BLOCK_H_
