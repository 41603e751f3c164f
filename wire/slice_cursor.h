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

  // A base-128 varint of at most `max_bytes` (<= 10) bytes; false when
  // truncated, longer, or holding bits past the 64th (a tenth byte above 1:
  // read carelessly, 2 << 63 wraps to 0). Protobuf reads tags and lengths
  // in at most 5 bytes, so a decoder that must agree with it passes 5 (or
  // less) for those.
  bool ReadVarint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int i = 0, shift = 0; i < max_bytes && shift < 64; ++i, shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      if (shift == 63 && (b & 0x7E) != 0) return false;
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
