// AdamW and Adam with 8-bit state (Dettmers et al. 2022, "8-bit Optimizers
// via Block-wise Quantization"): exp_avg (m) and exp_avg_sq (v) are kept as
// one byte per element (optim/quant8.h: m with the signed dynamic map, v
// with the unsigned one) and an FP32 absmax per block of `block` elements.
// A step, per block: dequantize m and v, apply the FP32 update of
// AdamUpdateReference (optim/optimizer.h) to the block's elements, and
// quantize the new m and v with the block's new absmax. The master weights
// stay FP32; a server would hold 4 (master) + 2 (mirror) + 2 (codes) + 8 /
// block (scales) bytes per element instead of 14.
//
// Adam8bitUpdateReference is the specification; its fixture is torch's
// AdamW with its state replaced by the dequantized state before each step
// and quantized after it (tests/fixtures/make_adam8bit_golden.py).
//
//   Adam8bitSlice s{.master = w, .exp_avg = qm, .exp_avg_absmax = am,
//                   .exp_avg_sq = qv, .exp_avg_sq_absmax = av,
//                   .mirror = bf16, .n = n, .block = kQuant8Block};
//   RETURN_IF_ERROR(Adam8bitUpdateReference(MakeAdamStep(config, t, coef),
//                                           GradView::Fp32(g), s));
#ifndef ZEROSHARD_OPTIM_ADAM8BIT_H_
#define ZEROSHARD_OPTIM_ADAM8BIT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optim/optimizer.h"
#include "optim/quant8.h"

namespace zeroshard {

// The state of n elements: codes n bytes each, absmax Quant8Blocks(n,
// block) floats each; block counts from the first element.
struct Adam8bitSlice {
  float* master = nullptr;
  uint8_t* exp_avg = nullptr;
  float* exp_avg_absmax = nullptr;
  uint8_t* exp_avg_sq = nullptr;
  float* exp_avg_sq_absmax = nullptr;
  uint16_t* mirror = nullptr;  // may be null
  size_t n = 0;
  size_t block = kQuant8Block;
};

// One step. INVALID_ARGUMENT, changing nothing, when a required array is
// null, block is 0, or the update would leave a non-finite m or v (a
// gradient the caller should have skipped: 8-bit state cannot hold one).
absl::Status Adam8bitUpdateReference(const AdamStep& step, GradView grad,
                                     const Adam8bitSlice& slice);

// A part of a slice with its own step: [offset, offset + n) of the slice,
// its gradient at grad (n elements). The parts of one chunk's update come
// from the parameter groups it crosses (each with its own lr and weight
// decay) and the pieces of gradient that cover it.
struct Adam8bitPart {
  AdamStep step;
  GradView grad;
  size_t offset = 0;
  size_t n = 0;
};

// The step the servers run: the parts (sorted, disjoint, together covering
// [0, slice.n) exactly) applied at once, block by block: dequantize a
// block's m and v, apply AdamUpdate (the dispatched kernel, equal to
// AdamUpdateReference bit for bit) to each part's elements of it, quantize
// the block back (QuantizeBlockwise). With one part covering the slice it
// equals Adam8bitUpdateReference bit for bit. INVALID_ARGUMENT, changing
// nothing, for parts that do not tile the slice, or an update that would
// leave a non-finite m or v.
absl::Status Adam8bitUpdateParts(absl::Span<const Adam8bitPart> parts,
                                 const Adam8bitSlice& slice);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAM8BIT_H_
