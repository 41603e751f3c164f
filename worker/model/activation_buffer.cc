#include "worker/model/activation_buffer.h"

#include <cstring>

namespace zeroshard::model {
namespace {

// Vectorisable round-to-nearest-even FP32 -> BF16 (NaN kept quiet), same
// results as common/dtype.h's FloatToBf16.
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

}  // namespace

ActBuffer::ActBuffer(ActivationMemory* mem, DType dtype, int64_t n)
    : mem_(mem), dtype_(dtype), n_(n) {
  data_.reset(new char[static_cast<size_t>(bytes())]);
  if (mem_ != nullptr) mem_->Add(bytes());
}

ActBuffer& ActBuffer::operator=(ActBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    mem_ = o.mem_;
    dtype_ = o.dtype_;
    n_ = o.n_;
    data_ = std::move(o.data_);
    o.n_ = 0;
    o.mem_ = nullptr;
  }
  return *this;
}

void ActBuffer::Release() {
  if (mem_ != nullptr && n_ > 0) mem_->Remove(bytes());
  data_.reset();
  n_ = 0;
  mem_ = nullptr;
}

void ActBuffer::FromFloat(const float* in) {
  if (dtype_ == DType::kBf16) {
    uint16_t* out = reinterpret_cast<uint16_t*>(data_.get());
#pragma omp parallel for schedule(static) if (n_ >= (1 << 18))
    for (int64_t i = 0; i < n_; ++i) out[i] = ToBf16(in[i]);
  } else {
    std::memcpy(data_.get(), in, static_cast<size_t>(bytes()));
  }
}

void ActBuffer::ToFloat(float* out) const {
  if (dtype_ == DType::kBf16) {
    const uint16_t* in = reinterpret_cast<const uint16_t*>(data_.get());
#pragma omp parallel for schedule(static) if (n_ >= (1 << 18))
    for (int64_t i = 0; i < n_; ++i) {
      const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(&out[i], &u, 4);
    }
  } else {
    std::memcpy(out, data_.get(), static_cast<size_t>(bytes()));
  }
}

void RoundThroughBf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(ToBf16(x[i])) << 16;
    std::memcpy(&x[i], &u, 4);
  }
}

}  // namespace zeroshard::model
