// One pre-LayerNorm GPT-2 block on a CUDA device: the same computation, in
// the same order and with the same roundings, as model/gpt_block.h
// (read that file's comment first), on device memory and the CUDA kernels.
//
//   DeviceBlockRunner runner(gemm, stream);
//   DeviceBlockActs acts;
//   RETURN_IF_ERROR(runner.Forward(dims, w, x_in, &x_out, &acts, &mem));
//   RETURN_IF_ERROR(runner.Backward(dims, w, x_in, acts, dx_out, dx_in, grad));
//
// Everything is enqueued on the runner's stream; pointers are device
// memory. Not thread-safe (one runner per model).
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_BLOCK_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_BLOCK_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/kernels/cuda/attention_gemm.h"
#include "model/kernels/cuda/flash_attention.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/linear.h"
#include "model/kernels/cuda/online_attention.h"
#include "model/cuda/device_buffer.h"
#include "model/gpt_block.h"

namespace zeroshard::model {

// One unit's parameters on the device, resolved per tensor: matrices in the
// compute dtype, vectors (gains, biases, embedding tables) in FP32, and each
// tensor's offset in the unit (for the gradient buffer).
struct DeviceUnitWeights {
  DType compute = DType::kBf16;
  std::vector<const void*> matrix;
  std::vector<const float*> vector;
  std::vector<uint64_t> offset;
  kernels::cuda::DeviceTensor Matrix(int t) const {
    return {matrix[t], compute};
  }
  const float* Vector(int t) const { return vector[t]; }
};

// How a block runs causal attention: kProbs saves the probabilities
// [B, H, T, T] in the compute dtype, as the CPU model does (GemmAttention:
// the products on cuBLASLt); kOnline saves lse [B, H, T] (FP32) and
// recomputes them in the backward (online_attention.h: memory linear in T,
// FP32 SIMT arithmetic), for contexts whose T x T would not fit; kFlash
// saves lse too, with the products on tensor cores (flash_attention.h:
// BF16 only).
enum class DeviceAttention { kProbs, kOnline, kFlash };

// A block's saved internals on the device (gpt_block.h's BlockActs).
struct DeviceBlockActs {
  DeviceBuffer ln1, qkv, probs, atty, x2, ln2, h;  // compute dtype
  DeviceBuffer mean1, rstd1, mean2, rstd2;         // FP32, [rows]
  DeviceBuffer lse;                       // FP32, kOnline and kFlash only
  bool held() const { return !x2.empty(); }
  void Release();
};

class DeviceBlockRunner {
 public:
  DeviceBlockRunner(kernels::cuda::CublasLtGemm* gemm, cudaStream_t stream,
                    DeviceAttention attention = DeviceAttention::kProbs)
      : stream_(stream),
        attention_kind_(attention),
        linear_(gemm, &dy_bf16_),
        attention_(gemm) {}

  absl::Status Forward(const BlockDims& d, const DeviceUnitWeights& w,
                       const DeviceBuffer& x_in, DeviceBuffer* x_out,
                       DeviceBlockActs* acts, ActivationMemory* mem);
  // dx_in [rows, width] written from dx_out (both FP32, device); the unit's
  // gradients accumulated into grad (device FP32, the unit's offsets).
  absl::Status Backward(const BlockDims& d, const DeviceUnitWeights& w,
                        const DeviceBuffer& x_in, const DeviceBlockActs& acts,
                        const float* dx_out, float* dx_in, float* grad);

  cudaStream_t stream() const { return stream_; }
  // FP32 scratch slot `slot` of at least n floats (contents undefined).
  absl::StatusOr<float*> Scratch(int slot, int64_t n);
  // The bytes of scratch held (for the peak-memory report).
  int64_t scratch_bytes() const;
  // Marks each op of the block on `timer` (null: none; op_timer.h).
  void set_timer(kernels::cuda::OpTimer* timer) {
    timer_ = timer;
    linear_.set_timer(timer);
  }

 private:
  void Mark(const char* label) const { kernels::cuda::MarkOp(timer_, label); }

  cudaStream_t stream_;
  DeviceAttention attention_kind_;
  DeviceScratch dy_bf16_;
  DeviceScratch scratch_[9];
  kernels::cuda::Linear linear_;
  kernels::cuda::GemmAttention attention_;  // per-head products on cuBLASLt
  kernels::cuda::FlashAttention flash_;
  kernels::cuda::OpTimer* timer_ = nullptr;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_BLOCK_H_
