// The shape of one causal self-attention call, shared by the CPU and CUDA
// attention (model/kernels/cpu/attention.h, model/kernels/cuda/
// attention.h): qkv [B, T, 3C], probs [B, H, T, T], y [B, T, C], head h at
// columns [h*hd, (h+1)*hd) of each third, hd = C / H.
#ifndef ZEROSHARD_MODEL_KERNELS_ATTENTION_SHAPE_H_
#define ZEROSHARD_MODEL_KERNELS_ATTENTION_SHAPE_H_

#include <cstdint>

#include "common/dtype.h"

namespace zeroshard::kernels {

struct AttentionShape {
  int64_t batch = 0, seq = 0, width = 0, heads = 0;
  DType dtype = DType::kFp32;  // of qkv and probs
};

}  // namespace zeroshard::kernels

#endif  // ZEROSHARD_MODEL_KERNELS_ATTENTION_SHAPE_H_
