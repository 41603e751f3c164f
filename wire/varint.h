// Protobuf base-128 varints and wire types, for the hand-encoded messages
// (wire/gather_codec.h, wire/push_grad_codec.h). Decoding lives with the
// slice reader (wire/slice_cursor.h).
//
//   uint8_t buf[kMaxVarintBytes];
//   uint8_t* end = PutVarint(300, buf);   // end - buf == VarintSize(300) == 2
#ifndef ZEROSHARD_WIRE_VARINT_H_
#define ZEROSHARD_WIRE_VARINT_H_

#include <cstddef>
#include <cstdint>

namespace zeroshard {

inline constexpr size_t kMaxVarintBytes = 10;

// Protobuf wire types (the low three bits of a field's tag).
inline constexpr int kVarint = 0;
inline constexpr int kFixed64 = 1;
inline constexpr int kLengthDelimited = 2;
inline constexpr int kFixed32 = 5;

// A field's tag: (number << 3) | wire type.
inline constexpr uint8_t FieldTag(int number, int wire_type) {
  return static_cast<uint8_t>((number << 3) | wire_type);
}

// Bytes PutVarint writes for v: 1 to 10.
inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Writes v at p (VarintSize(v) bytes) and returns the byte after it.
inline uint8_t* PutVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_VARINT_H_
