// Shared pieces of the fuzz targets (tests/fuzz/): reading a fuzz input as
// a few control bytes and a list of records, and writing seeds in that
// form (make_seeds.cc).
//
// The record framing is deliberately simple so that libFuzzer's mutations
// keep most inputs well-formed: each record is a little-endian u16 length
// and that many bytes; a length running past the end takes what is left.
//
//   FuzzInput in(data, size);
//   const uint8_t flags = in.Byte();
//   while (!in.empty()) Handle(in.Record());
#ifndef ZEROSHARD_TESTS_FUZZ_FUZZ_UTIL_H_
#define ZEROSHARD_TESTS_FUZZ_FUZZ_UTIL_H_

#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::fuzz {

// Protobuf logs every string field with invalid UTF-8 it refuses: noise
// (and time) when a fuzzer feeds it such bytes on purpose.
inline void QuietProtobuf() {
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
}

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  // The next byte, 0 past the end.
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // The next n bytes as a little-endian integer (zeros past the end).
  uint64_t Uint(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{Byte()} << (8 * i);
    return v;
  }
  // The next record (see the file comment).
  std::string_view Record() {
    const size_t len = static_cast<size_t>(Uint(2));
    const size_t take = std::min(len, remaining());
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), take);
    pos_ += take;
    return out;
  }
  // Everything not read yet.
  std::string_view Rest() {
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_),
                         remaining());
    pos_ = size_;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The inverse of FuzzInput, for seeds: control bytes, then records.
class FuzzInputWriter {
 public:
  FuzzInputWriter& Byte(uint8_t b) {
    out_.push_back(static_cast<char>(b));
    return *this;
  }
  FuzzInputWriter& Uint(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  FuzzInputWriter& Record(std::string_view bytes) {
    Uint(bytes.size(), 2);
    out_.append(bytes.data(), bytes.size());
    return *this;
  }
  FuzzInputWriter& Raw(std::string_view bytes) {
    out_.append(bytes.data(), bytes.size());
    return *this;
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

}  // namespace zeroshard::fuzz

#endif  // ZEROSHARD_TESTS_FUZZ_FUZZ_UTIL_H_
