// Device helpers of the row kernels (one block of kThreads per row): typed
// loads and stores of FP32 / BF16 elements, and a block-wide reduction
// returned to every thread. Included by .cu files only.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_ROW_BLOCK_CUH_
#define ZEROSHARD_MODEL_KERNELS_CUDA_ROW_BLOCK_CUH_

#include <cstdint>

#include <cub/block/block_reduce.cuh>

#include "common/bf16_bits.h"
#include "model/kernels/cuda/launch.h"

namespace zeroshard::kernels::cuda {

using BlockFloat = cub::BlockReduce<float, kThreads>;

__device__ inline float Ld(float x) { return x; }
__device__ inline float Ld(uint16_t x) { return Bf16BitsToFloat(x); }
__device__ inline void St(float* p, float v) { *p = v; }
__device__ inline void St(uint16_t* p, float v) { *p = FloatToBf16Bits(v); }

// The block's reduction of v with `op`, returned to every thread.
template <typename Op>
__device__ inline float BlockAll(float v, Op op, BlockFloat::TempStorage& tmp,
                                 float* broadcast) {
  const float r = BlockFloat(tmp).Reduce(v, op);
  if (threadIdx.x == 0) *broadcast = r;
  __syncthreads();
  const float out = *broadcast;
  __syncthreads();
  return out;
}

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_ROW_BLOCK_CUH_
