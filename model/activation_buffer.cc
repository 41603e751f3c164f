#include "model/activation_buffer.h"

#include <cstring>

#include "model/kernels/cpu/bf16_convert.h"

namespace zeroshard::model {

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
    kernels::cpu::FloatsToBf16(in, reinterpret_cast<uint16_t*>(data_.get()), n_);
  } else {
    std::memcpy(data_.get(), in, static_cast<size_t>(bytes()));
  }
}

void ActBuffer::ToFloat(float* out) const {
  if (dtype_ == DType::kBf16) {
    kernels::cpu::Bf16sToFloat(reinterpret_cast<const uint16_t*>(data_.get()), out, n_);
  } else {
    std::memcpy(out, data_.get(), static_cast<size_t>(bytes()));
  }
}

void RoundThroughBf16(float* x, int64_t n) { kernels::cpu::RoundFloatsThroughBf16(x, n); }

}  // namespace zeroshard::model
