// Block-wise dynamic 8-bit quantization (Dettmers et al. 2022, "8-bit
// Optimizers via Block-wise Quantization"): the state arrays of an 8-bit
// Adam (m signed, v unsigned) kept as one byte per element plus one FP32
// scale (the block's absolute maximum) per block of elements.
//
// The code: 256 values in [-1, 1] (signed) or [0, 1] (unsigned), the
// dynamic tree map of the paper as bitsandbytes' create_dynamic_map builds
// it with 7 exponent bits: for i = 0..6, the midpoints of the k - 1 equal
// intervals of linspace(0.1, 1, k), k = 2^i + 1 (signed; 2^(i+1) + 1
// unsigned), times 10^(i - 6), with their negatives when signed, and 0 and
// 1, sorted. Each value is computed in double and rounded once to FP32
// (bitsandbytes computes it in FP32 through torch.linspace, whose last bit
// depends on the CPU's vector width; the two maps agree to within an ULP,
// tests/fixtures/make_quant8_golden.py measures it).
//
// QuantizeBlockwiseReference is the specification, per block b of `block`
// elements (the last one may be shorter):
//   absmax[b] = max |x| over the block
//   y = x / absmax[b]                          (FP32, correctly rounded)
//   code = the number of thresholds t_j = (c_j + c_{j+1}) / 2 (in double)
//          with y > t_j                        (nearest value; a tie: lower)
// and a block of zeros has absmax 0 and every code that of the value 0.
// Dequantization is out = c[code] * absmax[b] (FP32). Non-finite inputs are
// refused (an optimizer skips a step whose gradient is not finite, so its
// state never holds one).
//
//   std::vector<uint8_t> q(n);
//   std::vector<float> absmax(Quant8Blocks(n, kQuant8Block));
//   RETURN_IF_ERROR(QuantizeBlockwiseReference(x, kQuant8Block,
//                                              Quant8Map::kSigned, q, absmax));
#ifndef ZEROSHARD_OPTIM_QUANT8_H_
#define ZEROSHARD_OPTIM_QUANT8_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/optimizer_config.h"

namespace zeroshard {

// The paper's and bitsandbytes' block size for the optimizer states (the
// servers' 8-bit slots, common/optimizer_config.h).
inline constexpr size_t kQuant8Block = kQ8SlotBlock;

enum class Quant8Map { kSigned, kUnsigned };

// The map of an 8-bit slot format (kQ8Signed: signed; kQ8Unsigned:
// unsigned; not called for kFp32).
inline Quant8Map Quant8MapOf(SlotFormat format) {
  return format == SlotFormat::kQ8Signed ? Quant8Map::kSigned
                                         : Quant8Map::kUnsigned;
}

// The 256 code values, ascending (lives for the process).
const std::array<float, 256>& DynamicMap(Quant8Map map);

// The code of the value 0 (127 signed, 0 unsigned).
uint8_t ZeroCode(Quant8Map map);

// The number of blocks of `block` elements that cover n elements.
size_t Quant8Blocks(size_t n, size_t block);

// Quantizes x into codes (x.size() bytes) and absmax (Quant8Blocks(n,
// block) scales). INVALID_ARGUMENT, writing nothing, for a block size of 0,
// sizes that do not match, or a non-finite element (named by its index).
absl::Status QuantizeBlockwiseReference(absl::Span<const float> x,
                                        size_t block, Quant8Map map,
                                        absl::Span<uint8_t> codes,
                                        absl::Span<float> absmax);

// out[i] = DynamicMap(map)[codes[i]] * absmax[i / block]. INVALID_ARGUMENT,
// writing nothing, for sizes that do not match.
absl::Status DequantizeBlockwiseReference(absl::Span<const uint8_t> codes,
                                          absl::Span<const float> absmax,
                                          size_t block, Quant8Map map,
                                          absl::Span<float> out);

// The kernels the servers run, equal to the references bit for bit (tests
// compare them on random inputs and on every edge of the table below),
// without the checks: x finite, the sizes as the references require.
// QuantizeBlockwise compares y with each threshold rounded down to FP32,
// which gives the same count (a threshold, the midpoint of two floats, is a
// float or lies strictly between two). One element at a time
// (QuantizeBlockwiseScalar, which tests compare too) it finds that count
// from y's top 16 bits (sign, exponent, 7 mantissa bits): a table gives,
// per such bucket, the thresholds below it and the one threshold inside it
// (no bucket holds two), so a code costs a lookup and one compare. With
// AVX-512 it counts 16 lanes at a time within y's decade by arithmetic and
// redoes from the table the lanes within a band of a threshold
// (optim/quant8_code.h). DequantizeBlockwise with AVX-512 takes the 256
// values from registers: byte permutes 64 codes at a time with VBMI, else
// float permutes and blends.
void QuantizeBlockwise(const float* x, size_t n, size_t block, Quant8Map map,
                       uint8_t* codes, float* absmax);
// The two halves of QuantizeBlockwise for one block, for a caller that must
// refuse a non-finite block before writing its codes: BlockAbsMax is max |x|
// over x[0, n), or NaN when an element is not finite; QuantizeBlock writes
// the n codes of a block whose (finite) absmax is m.
float BlockAbsMax(const float* x, size_t n);
void QuantizeBlock(const float* x, size_t n, float m, Quant8Map map,
                   uint8_t* codes);
void QuantizeBlockwiseScalar(const float* x, size_t n, size_t block,
                             Quant8Map map, uint8_t* codes, float* absmax);
void DequantizeBlockwise(const uint8_t* codes, const float* absmax, size_t n,
                         size_t block, Quant8Map map, float* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_QUANT8_H_
