// AdamW / Adam with 8-bit block-wise state: the scalar reference
// (optim/adam8bit.h).
#include "optim/adam8bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "optim/grad_scan.h"

namespace zeroshard {

absl::Status Adam8bitUpdateReference(const AdamStep& step, GradView grad,
                                     const Adam8bitSlice& s) {
  if (s.n == 0) return absl::OkStatus();
  if (s.master == nullptr || s.exp_avg == nullptr ||
      s.exp_avg_absmax == nullptr || s.exp_avg_sq == nullptr ||
      s.exp_avg_sq_absmax == nullptr || grad.data == nullptr) {
    return absl::InvalidArgumentError(
        "8-bit Adam: master, gradient, codes and absmax arrays are required");
  }
  if (s.block == 0) {
    return absl::InvalidArgumentError("8-bit Adam: block size 0");
  }
  const size_t blocks = Quant8Blocks(s.n, s.block);
  // The whole slice is updated in FP32 first and committed only when every
  // m and v is finite, so a refusal changes nothing.
  thread_local std::vector<float> master, m, v;
  master.assign(s.master, s.master + s.n);
  m.resize(s.n);
  v.resize(s.n);
  absl::Status st = DequantizeBlockwiseReference(
      {s.exp_avg, s.n}, {s.exp_avg_absmax, blocks}, s.block,
      Quant8Map::kSigned, absl::MakeSpan(m));
  if (st.ok()) {
    st = DequantizeBlockwiseReference(
        {s.exp_avg_sq, s.n}, {s.exp_avg_sq_absmax, blocks}, s.block,
        Quant8Map::kUnsigned, absl::MakeSpan(v));
  }
  if (!st.ok()) return st;
  AdamUpdateReference(step, grad,
                      {.master = master.data(), .exp_avg = m.data(),
                       .exp_avg_sq = v.data(), .mirror = nullptr, .n = s.n});
  for (size_t i = 0; i < s.n; ++i) {
    if (!std::isfinite(m[i]) || !std::isfinite(v[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "8-bit Adam: element ", i, " of the slice would hold a non-finite "
          "state (exp_avg ", m[i], ", exp_avg_sq ", v[i],
          "); a step with a non-finite gradient must be skipped"));
    }
  }
  // Finite values always quantize.
  st = QuantizeBlockwiseReference(m, s.block, Quant8Map::kSigned,
                                  {s.exp_avg, s.n}, {s.exp_avg_absmax, blocks});
  if (st.ok()) {
    st = QuantizeBlockwiseReference(v, s.block, Quant8Map::kUnsigned,
                                    {s.exp_avg_sq, s.n},
                                    {s.exp_avg_sq_absmax, blocks});
  }
  if (!st.ok()) return st;
  std::memcpy(s.master, master.data(), s.n * sizeof(float));
  if (s.mirror != nullptr) FloatToBf16Array(s.master, s.mirror, s.n);
  return absl::OkStatus();
}

namespace {

// Whether this step can leave no m or v non-finite, so that its blocks
// need not be saved: every part's gradient finite and, scaled by its
// coefficient, at most kMaxScaledGrad = 2^60 (as the servers admit
// pushes), no part adding Adam's L2 term (p · weight_decay, which the
// gradient does not bound), and every scale of the old state at most
// 2^120. Then |g| <= 2^60 after scaling, |m'| <= 2^60 + 2^120 and
// v' <= 2^120 + 2^120: finite (FLT_MAX is about 2^128).
bool CannotOverflow(absl::Span<const Adam8bitPart> parts,
                    const Adam8bitSlice& s, size_t blocks) {
  constexpr float kMaxScale = 1.329227995784915872903807060280344576e36f;  // 2^120
  for (const Adam8bitPart& p : parts) {
    if (AdamElementArgsOf(p.step).l2) return false;
    const GradScan g = ScanGrad(p.grad, p.n);
    if (!g.finite() ||
        static_cast<double>(g.max_abs()) * std::fabs(p.step.coefficient) >
            kMaxScaledGrad) {
      return false;
    }
  }
  for (size_t b = 0; b < blocks; ++b) {
    if (!(s.exp_avg_absmax[b] <= kMaxScale) ||
        !(s.exp_avg_sq_absmax[b] <= kMaxScale)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status Adam8bitUpdateParts(absl::Span<const Adam8bitPart> parts,
                                 const Adam8bitSlice& s) {
  if (s.n == 0 && parts.empty()) return absl::OkStatus();
  if (s.master == nullptr || s.exp_avg == nullptr ||
      s.exp_avg_absmax == nullptr || s.exp_avg_sq == nullptr ||
      s.exp_avg_sq_absmax == nullptr || s.block == 0) {
    return absl::InvalidArgumentError(
        "8-bit Adam: master, codes and absmax arrays and a block size are "
        "required");
  }
  size_t at = 0;
  for (const Adam8bitPart& p : parts) {
    if (p.offset != at || p.n == 0 || p.n > s.n - at ||
        (p.grad.data == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "8-bit Adam: the parts must tile the slice of ", s.n,
          " elements in order; one is [", p.offset, ", ", p.offset + p.n,
          ") after ", at, " elements"));
    }
    at += p.n;
  }
  if (at != s.n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "8-bit Adam: the parts cover ", at, " of the slice's ", s.n,
        " elements"));
  }
  // Block by block, in cache: the block's m and v dequantized into
  // block-sized buffers, AdamUpdate on each part's elements of it (master
  // and mirror in place), then m and v quantized back. Unless no m or v
  // can leave the finite range (CannotOverflow), what a block overwrites
  // is saved first, so that a block whose m or v would not be finite
  // restores the blocks before it and refuses with nothing changed.
  const size_t blocks = Quant8Blocks(s.n, s.block);
  const bool save = !CannotOverflow(parts, s, blocks);
  thread_local std::vector<float> m, v, undo_master, undo_absmax;
  thread_local std::vector<uint16_t> undo_mirror;
  thread_local std::vector<uint8_t> undo_codes;
  m.resize(s.block);
  v.resize(s.block);
  if (save) {
    undo_master.resize(s.n);
    undo_codes.resize(2 * s.n);
    undo_absmax.resize(2 * blocks);
    if (s.mirror != nullptr) undo_mirror.resize(s.n);
  }
  // Puts back blocks [0, b) whole and block b's master and mirror.
  auto restore = [&](size_t b) {
    const size_t end = std::min(s.n, (b + 1) * s.block);
    std::memcpy(s.master, undo_master.data(), end * sizeof(float));
    if (s.mirror != nullptr) {
      std::memcpy(s.mirror, undo_mirror.data(), end * sizeof(uint16_t));
    }
    std::memcpy(s.exp_avg, undo_codes.data(), b * s.block);
    std::memcpy(s.exp_avg_sq, undo_codes.data() + s.n, b * s.block);
    std::memcpy(s.exp_avg_absmax, undo_absmax.data(), b * sizeof(float));
    std::memcpy(s.exp_avg_sq_absmax, undo_absmax.data() + blocks,
                b * sizeof(float));
  };
  size_t part = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * s.block, len = std::min(s.block, s.n - begin);
    if (save) {
      std::memcpy(undo_master.data() + begin, s.master + begin,
                  len * sizeof(float));
      if (s.mirror != nullptr) {
        std::memcpy(undo_mirror.data() + begin, s.mirror + begin,
                    len * sizeof(uint16_t));
      }
      std::memcpy(undo_codes.data() + begin, s.exp_avg + begin, len);
      std::memcpy(undo_codes.data() + s.n + begin, s.exp_avg_sq + begin, len);
      undo_absmax[b] = s.exp_avg_absmax[b];
      undo_absmax[blocks + b] = s.exp_avg_sq_absmax[b];
    }
    DequantizeBlockwise(s.exp_avg + begin, s.exp_avg_absmax + b, len, s.block,
                        Quant8Map::kSigned, m.data());
    DequantizeBlockwise(s.exp_avg_sq + begin, s.exp_avg_sq_absmax + b, len,
                        s.block, Quant8Map::kUnsigned, v.data());
    // The parts that meet [begin, begin + len), in order.
    while (part < parts.size() && parts[part].offset + parts[part].n <= begin) {
      ++part;
    }
    for (size_t k = part; k < parts.size() && parts[k].offset < begin + len; ++k) {
      const Adam8bitPart& p = parts[k];
      const size_t lo = std::max(begin, p.offset);
      const size_t hi = std::min(begin + len, p.offset + p.n);
      const size_t esize = p.grad.bf16 ? sizeof(uint16_t) : sizeof(float);
      const GradView g{static_cast<const char*>(p.grad.data) +
                           (lo - p.offset) * esize,
                       p.grad.bf16};
      AdamUpdate(p.step, g,
                 {.master = s.master + lo,
                  .exp_avg = m.data() + (lo - begin),
                  .exp_avg_sq = v.data() + (lo - begin),
                  .mirror = s.mirror != nullptr ? s.mirror + lo : nullptr,
                  .n = hi - lo});
    }
    // The maxima are NaN when an m or v is not finite; only then are the
    // elements searched.
    const float m_max = BlockAbsMax(m.data(), len);
    const float v_max = BlockAbsMax(v.data(), len);
    if (std::isnan(m_max) || std::isnan(v_max)) {
      for (size_t i = 0; i < len; ++i) {
        if (!std::isfinite(m[i]) || !std::isfinite(v[i])) {
          if (save) restore(b);
          return absl::InvalidArgumentError(absl::StrCat(
              "8-bit Adam: element ", begin + i, " of the slice would hold a "
              "non-finite state (exp_avg ", m[i], ", exp_avg_sq ", v[i],
              "); a step with a non-finite gradient must be skipped"));
        }
      }
    }
    s.exp_avg_absmax[b] = m_max;
    s.exp_avg_sq_absmax[b] = v_max;
    QuantizeBlock(m.data(), len, m_max, Quant8Map::kSigned, s.exp_avg + begin);
    QuantizeBlock(v.data(), len, v_max, Quant8Map::kUnsigned,
                  s.exp_avg_sq + begin);
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
