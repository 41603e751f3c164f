// Causal self-attention with an online softmax and its products on tensor
// cores (FlashAttention-2's schedule), for BF16 qkv on sm_80 and later:
// `zeroshard-worker --attention=flash`. The contract is the online
// attention's (online_attention.h): qkv [B, T, 3C] BF16; the forward writes
// y [B*T, C] (FP32) and lse [B, H, T] (FP32), never the T x T
// probabilities; the backward recomputes them from lse and writes dqkv
// [B*T, 3C] (FP32, every element). Head dims 16, 32, 64, 128.
//
//   FlashAttention flash;
//   RETURN_IF_ERROR(flash.Forward(shape, qkv, lse, y, stream));
//   RETURN_IF_ERROR(flash.Backward(shape, qkv, lse, y, dy, dqkv, stream));
//
// Forward: a block of 4 warps per (64 queries, head, sequence); each warp
// owns 16 query rows. Key/value tiles of 64 rows stream through shared
// memory; S = Q K^T and O += P V are WMMA 16x16x16 BF16 products with FP32
// accumulation; the row maximum, sum and rescale are FP32, one row at a
// time across the warp. P is rounded to BF16 for its product, as
// FlashAttention does; the row sum uses the unrounded values.
//
// Backward: a block per (64 keys, head, sequence), each warp owning 16
// keys, whose dK and dV stay in WMMA accumulators while the query tiles on
// and below the diagonal stream past: S^T = K Q^T and dP^T = V dO^T,
// P = exp(scale S - lse), dS = P (dP - D) scale with D_i = dO_i . y_i
// (dO: dY rounded to BF16, the same dO as dP's, so sum_j P (dP - D) = 0),
// dV += P^T dO, dK += dS^T Q, and dQ += dS K added into dqkv with atomics
// (so dQ's sums run in no fixed order). dO and dS are rounded to BF16 for
// their products, as GemmAttention rounds dY and dS.
//
// Its oracle is the online attention's CPU twin (model/kernels/cpu/
// online_attention.h, itself held to the CPU attention), within BF16
// tolerances. The kernels (flash_attention_kernels.cuh) are also compiled
// by the host compiler and run on the CPU under an emulation of a block and
// of WMMA (tests/model/flash_attention_emulation_test.cc), which checks
// their tiles, mask and indices in every CI run; on a device,
// CudaKernelTest.OnlineAttentionMatchesTheTwin and
// DeviceGptTest.OnlineAttentionMatchesTheCpuModel check the hardware's
// arithmetic.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_FLASH_ATTENTION_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_FLASH_ATTENTION_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "common/device_scratch.h"
#include "model/kernels/attention_shape.h"

namespace zeroshard::kernels::cuda {

// The shapes the kernels take: positive sizes, C divisible by H, a head
// dimension of 16, 32, 64 or 128, BF16 qkv, B and H within a grid's y/z
// (65535). Host-only. At launch the device is checked too: compute
// capability 8.0+, and the opt-in shared memory per block, 70 KiB forward
// and 105.5 KiB backward at head dim 64, 110 / 153.5 KiB at 128 (an sm_80 or
// sm_90 part; sm_86/89 offer 99 KiB).
absl::Status CheckFlashAttentionShape(const AttentionShape& s);

class FlashAttention {
 public:
  absl::Status Forward(const AttentionShape& s, const void* qkv, float* lse,
                       float* y, cudaStream_t stream);
  // Reads the forward's lse and y; dy FP32 [B*T, C].
  absl::Status Backward(const AttentionShape& s, const void* qkv,
                        const float* lse, const float* y, const float* dy,
                        float* dqkv, cudaStream_t stream);

 private:
  DeviceScratch dy_bf16_, dsum_;
};

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_FLASH_ATTENTION_H_
