// AdamW / Adam with 8-bit block-wise state: the scalar reference
// (optim/adam8bit.h).
#include "optim/adam8bit.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/dtype.h"

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
  // The mirror is written by the update kernel into a copy (BF16 of the new
  // master, as FloatToBf16Array rounds), committed with the rest.
  thread_local std::vector<float> master, m, v;
  thread_local std::vector<uint16_t> mirror;
  master.assign(s.master, s.master + s.n);
  m.resize(s.n);
  v.resize(s.n);
  if (s.mirror != nullptr) mirror.resize(s.n);
  DequantizeBlockwise(s.exp_avg, s.exp_avg_absmax, s.n, s.block,
                      Quant8Map::kSigned, m.data());
  DequantizeBlockwise(s.exp_avg_sq, s.exp_avg_sq_absmax, s.n, s.block,
                      Quant8Map::kUnsigned, v.data());
  for (const Adam8bitPart& p : parts) {
    AdamUpdate(p.step, p.grad,
               {.master = master.data() + p.offset,
                .exp_avg = m.data() + p.offset,
                .exp_avg_sq = v.data() + p.offset,
                .mirror = s.mirror != nullptr ? mirror.data() + p.offset : nullptr,
                .n = p.n});
  }
  // Any non-finite m or v (all exponent bits set), by integer ops that
  // vectorize; only then are the elements searched.
  uint32_t inf = 0;
  for (size_t i = 0; i < s.n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &m[i], 4);
    std::memcpy(&b, &v[i], 4);
    inf |= static_cast<uint32_t>((a & 0x7f800000u) == 0x7f800000u) |
           static_cast<uint32_t>((b & 0x7f800000u) == 0x7f800000u);
  }
  if (inf != 0) {
    for (size_t i = 0; i < s.n; ++i) {
      if (!std::isfinite(m[i]) || !std::isfinite(v[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "8-bit Adam: element ", i, " of the slice would hold a "
            "non-finite state (exp_avg ", m[i], ", exp_avg_sq ", v[i],
            "); a step with a non-finite gradient must be skipped"));
      }
    }
  }
  QuantizeBlockwise(m.data(), s.n, s.block, Quant8Map::kSigned, s.exp_avg,
                    s.exp_avg_absmax);
  QuantizeBlockwise(v.data(), s.n, s.block, Quant8Map::kUnsigned,
                    s.exp_avg_sq, s.exp_avg_sq_absmax);
  std::memcpy(s.master, master.data(), s.n * sizeof(float));
  if (s.mirror != nullptr) {
    std::memcpy(s.mirror, mirror.data(), s.n * sizeof(uint16_t));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
