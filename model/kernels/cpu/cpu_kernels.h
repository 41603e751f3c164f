// The CPU kernel set of the worker's models (GPT-2; Llama's RMSNorm, rotary
// embeddings, SwiGLU and grouped key/value heads), forward and backward, in
// one include.
//
// Backend contract (how a CUDA backend slots in): every op
// is a free function in namespace zeroshard::kernels::cpu over raw pointers;
// a CUDA backend provides the same functions, with the same signatures and
// semantics, in namespace zeroshard::kernels::cuda (device pointers, plus an
// explicit stream). The model (model) calls the ops only through these
// names, so switching backends is a namespace alias in one place
// (model/gpt_block.cc: `namespace k = kernels::cpu;`).
//
// Conventions shared by every op:
//   * Rows are tokens: M = batch * seq rows of C channels, row-major.
//   * Elementwise and normalisation ops read and write FP32; matrix products
//     (gemm.h, linear.h, attention.h) read FP32 or BF16 operands and
//     accumulate in FP32.
//   * Parameter gradients are ACCUMULATED (+=) into FP32 buffers, so
//     micro-batches and tied weights sum; input gradients are WRITTEN unless
//     the function says otherwise.
//   * Linear weights use Hugging Face GPT-2's Conv1D layout [in, out]:
//     y = x W + b.
//   * Sizes are validated; a bad size returns INVALID_ARGUMENT and touches
//     nothing.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_CPU_KERNELS_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_CPU_KERNELS_H_

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/cross_entropy.h"
#include "model/kernels/cpu/elementwise.h"
#include "model/kernels/cpu/embedding.h"
#include "model/kernels/cpu/gemm.h"
#include "model/kernels/cpu/grouped_qkv.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/linear.h"
#include "model/kernels/cpu/rmsnorm.h"
#include "model/kernels/cpu/rope.h"
#include "model/kernels/cpu/swiglu.h"

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_CPU_KERNELS_H_
