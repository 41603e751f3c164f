// Protobuf base-128 varints, for the hand-encoded wire messages (the server's
// Gather replies, the client's PushGrad pieces). Decoding lives with the
// slice reader (common/slice_cursor.h).
//
//   uint8_t buf[kMaxVarintBytes];
//   uint8_t* end = PutVarint(300, buf);   // end - buf == VarintSize(300) == 2
#ifndef ZEROSHARD_COMMON_VARINT_H_
#define ZEROSHARD_COMMON_VARINT_H_

#include <cstddef>
#include <cstdint>

namespace zeroshard {

inline constexpr size_t kMaxVarintBytes = 10;

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

#endif  // ZEROSHARD_COMMON_VARINT_H_
