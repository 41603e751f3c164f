// The CPU kernel set of the GPT worker, forward and backward, in one include.
//
// Backend contract (how a CUDA backend slots in): every op
// is a free function in namespace zeroshard::kernels::cpu over raw pointers;
// a CUDA backend provides the same functions, with the same signatures and
// semantics, in namespace zeroshard::kernels::cuda (device pointers, plus an
// explicit stream). The model (worker/model) calls the ops only through these
// names, so switching backends is a namespace alias in one place
// (worker/model/gpt_block.cc: `namespace k = kernels::cpu;`).
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
#ifndef ZEROSHARD_WORKER_KERNELS_CPU_CPU_KERNELS_H_
#define ZEROSHARD_WORKER_KERNELS_CPU_CPU_KERNELS_H_

#include "worker/kernels/cpu/attention.h"
#include "worker/kernels/cpu/cross_entropy.h"
#include "worker/kernels/cpu/elementwise.h"
#include "worker/kernels/cpu/embedding.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/kernels/cpu/layernorm.h"
#include "worker/kernels/cpu/linear.h"

#endif  // ZEROSHARD_WORKER_KERNELS_CPU_CPU_KERNELS_H_
