// The AVX-512 kernel of the servers' 8-bit AdamW step (adam8bit.cc), one
// block at a time and pipelined: block b's AdamW update, bound by its two
// divisions and square root, runs 16 lanes at a time interleaved with the
// quantization of block b - 1's new m and v, bound by permutes and
// compares, so that the core overlaps the two. Each element goes through
// AdamUpdateAvx512's operations (optim/avx512_lanes.h) and the decade
// search with its bucket fix-ups (optim/quant8_search_avx512.h), and a
// block's maxima are BlockAbsMax's, so the bits are those of the unfused
// path; tests compare the two. Not a public header of the part.
#ifndef ZEROSHARD_OPTIM_ADAM8BIT_AVX512_H_
#define ZEROSHARD_OPTIM_ADAM8BIT_AVX512_H_

#include <cstddef>
#include <cstdint>

#include "optim/optimizer.h"

namespace zeroshard {
namespace quant8_internal {

// A block's new m and v, waiting to be quantized, and where the codes go.
struct Q8Block {
  const float* m = nullptr;
  const float* v = nullptr;
  size_t n = 0;                // at most kQuant8Block
  float m_max = 0, v_max = 0;  // BlockAbsMax of each, finite
  uint8_t* m_codes = nullptr;
  uint8_t* v_codes = nullptr;
};

// max |m| and max |v| of an updated block, NaN when one is not finite (as
// BlockAbsMax gives them).
struct Q8Maxima {
  float m = 0, v = 0;
};

// Whether this CPU and build run AdamBlockAvx512 (AVX-512 F, BW, VL and DQ,
// and the decade search's tables).
bool CanRunAdamBlockAvx512();

// AdamUpdate(step, grad, block) on one block of at most kQuant8Block
// elements (its master and mirror in place; exp_avg and exp_avg_sq the
// block's m and v in FP32), and meanwhile QuantizeBlock of `prev` (null:
// none). Returns the block's maxima.
Q8Maxima AdamBlockAvx512(const AdamStep& step, GradView grad,
                         const AdamSlice& block, const Q8Block* prev);

}  // namespace quant8_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAM8BIT_AVX512_H_
