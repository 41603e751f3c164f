// SliceCursor: reads protobuf wire data spread over the slices of a
// grpc::ByteBuffer without copying it, so that large payloads can be used in
// place (wire/gather_codec.cc and wire/push_grad_codec.cc).
//
//   std::vector<grpc::Slice> slices;
//   buffer.Dump(&slices);
//   SliceCursor cursor(slices);
//   uint64_t tag;
//   if (!cursor.ReadVarint(&tag)) ...
//   std::vector<std::pair<const uint8_t*, size_t>> where;
//   if (!cursor.Take(len, &where)) ...   // the payload's pieces, in order
//
// The slices must outlive the cursor and every pointer it handed out.
#ifndef ZEROSHARD_WIRE_SLICE_CURSOR_H_
#define ZEROSHARD_WIRE_SLICE_CURSOR_H_

#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace zeroshard {

class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    Normalize();
  }

  // Bytes consumed so far.
  size_t consumed() const { return consumed_; }
  bool AtEnd() const { return index_ >= slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = slices_[index_].begin()[pos_++];
    ++consumed_;
    Normalize();
    return true;
  }

  // A base-128 varint of at most 10 bytes; false when truncated or too long.
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Consumes n bytes; when `segments` is given, records where they lie.
  bool Take(size_t n,
            std::vector<std::pair<const uint8_t*, size_t>>* segments) {
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t take = std::min(slices_[index_].size() - pos_, n);
      if (segments != nullptr) {
        segments->emplace_back(slices_[index_].begin() + pos_, take);
      }
      pos_ += take;
      consumed_ += take;
      n -= take;
      Normalize();
    }
    return true;
  }

 private:
  void Normalize() {
    while (index_ < slices_.size() && pos_ >= slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
  size_t consumed_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_SLICE_CURSOR_H_
