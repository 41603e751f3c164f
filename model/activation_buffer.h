// Activation storage with byte accounting.
//
// ActivationMemory counts the bytes of every live ActBuffer registered with
// it and tracks the peak, so a benchmark can report how much activation
// memory each checkpointing policy holds. An ActBuffer is an owning, movable
// array of FP32 or BF16 elements.
//
//   ActivationMemory mem;
//   ActBuffer x(&mem, DType::kBf16, M * C);   // mem.current() += 2*M*C
//   x.FromFloat(values);                       // rounds to BF16 (RNE)
//   x.ToFloat(scratch);
//   mem.peak();
//
// Not thread-safe: one model (one thread) per ActivationMemory.
#ifndef ZEROSHARD_MODEL_ACTIVATION_BUFFER_H_
#define ZEROSHARD_MODEL_ACTIVATION_BUFFER_H_

#include <cstdint>
#include <memory>

#include "common/dtype.h"

namespace zeroshard::model {

class ActivationMemory {
 public:
  void Add(int64_t bytes) {
    current_ += bytes;
    if (current_ > peak_) peak_ = current_;
  }
  void Remove(int64_t bytes) { current_ -= bytes; }
  int64_t current() const { return current_; }
  int64_t peak() const { return peak_; }
  // Restarts peak tracking from the current level.
  void ResetPeak() { peak_ = current_; }

 private:
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

class ActBuffer {
 public:
  ActBuffer() = default;
  // `mem` may be null (untracked); it must outlive the buffer.
  ActBuffer(ActivationMemory* mem, DType dtype, int64_t n);
  ~ActBuffer() { Release(); }
  ActBuffer(ActBuffer&& o) noexcept { *this = std::move(o); }
  ActBuffer& operator=(ActBuffer&& o) noexcept;
  ActBuffer(const ActBuffer&) = delete;
  ActBuffer& operator=(const ActBuffer&) = delete;

  bool empty() const { return n_ == 0; }
  int64_t size() const { return n_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return n_ * static_cast<int64_t>(DTypeSize(dtype_)); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  float* f32() { return reinterpret_cast<float*>(data_.get()); }  // kFp32 only
  const float* f32() const { return reinterpret_cast<const float*>(data_.get()); }

  // Stores n floats (rounding to BF16 when the buffer is BF16).
  void FromFloat(const float* in);
  // Widens the buffer into n floats.
  void ToFloat(float* out) const;
  // Frees the storage (and its accounting).
  void Release();

 private:
  ActivationMemory* mem_ = nullptr;
  DType dtype_ = DType::kFp32;
  int64_t n_ = 0;
  std::unique_ptr<char[]> data_;
};

// Rounds n floats to BF16 and back in place (what storing in BF16 does).
void RoundThroughBf16(float* x, int64_t n);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_ACTIVATION_BUFFER_H_
